"""Where each runtime stands for a SyncResource, and which records are stale: decided without I/O."""

from reconciler import model, sync_plan, tenancy

EVERYWHERE = tenancy.policy_for(
    "ns", [tenancy.BindingSpec.model_validate({"namespaces": ["ns"], "runtimeSelector": {}})]
)
DEV_ONLY = tenancy.policy_for(
    "ns",
    [tenancy.BindingSpec.model_validate({"namespaces": ["ns"], "runtimeSelector": {"matchLabels": {"env": "dev"}}})],
)


def spec(selector: dict[str, str] | None = None, kyma: str | None = None) -> model.Spec:
    target = {"kyma": kyma} if kyma else {"target": {"selector": {"matchLabels": selector or {}}}}
    return model.Spec.model_validate({**target, "items": []})


def test_selected_runtimes_sync_and_unselected_existing_ones_depart() -> None:
    """A recorded runtime whose Kyma exists but no longer matches departs; matching ones sync."""
    kymas = {"a": {"tier": "beta"}, "b": {}}
    placed = sync_plan.place(spec({"tier": "beta"}), kymas=kymas, recorded=["a", "b"], policy=EVERYWHERE)
    assert placed == {"a": sync_plan.Placement.SYNC, "b": sync_plan.Placement.DEPART}


def test_a_recorded_runtime_without_a_kyma_is_gone_not_departing() -> None:
    """Absent from a synced Kyma cache: deprovisioned (records dropped after KCP confirms), never a delete there."""
    placed = sync_plan.place(spec(kyma="a"), kymas={}, recorded=["a"], policy=EVERYWHERE)
    assert placed == {"a": sync_plan.Placement.GONE}


def test_selected_but_not_admitted_runtimes_are_forbidden_not_departing() -> None:
    """A binding that does not cover a runtime freezes it: nothing applied, nothing deleted."""
    kymas = {"dev": {"env": "dev"}, "prod": {"env": "prod"}}
    placed = sync_plan.place(spec(), kymas=kymas, recorded=["prod"], policy=DEV_ONLY)
    assert placed == {"dev": sync_plan.Placement.SYNC, "prod": sync_plan.Placement.FORBIDDEN}


def test_stale_spares_records_of_wanted_and_unresolved_items() -> None:
    """Only a record no item names (by group/kind/namespace/name, any version) and whose item resolved is stale."""

    def record(item: str, name: str, api_version: str = "v1") -> model.AppliedRef:
        return model.AppliedRef(
            runtime="a", item=item, apiVersion=api_version, kind="ConfigMap", namespace="ns", name=name
        )

    records = [record("kept", "cm-1", "v1beta1"), record("unknown", "cm-2"), record("renamed", "cm-old")]
    wanted = {
        sync_plan.identity("v1", "ConfigMap", "ns", "cm-1"),
        sync_plan.identity("v1", "ConfigMap", "ns", "cm-new"),
    }
    assert sync_plan.stale(records, wanted=wanted, unresolved_items={"unknown"}) == [records[2]]


def test_overall_is_the_worst_item_state() -> None:
    """Error beats Conflict beats Forbidden beats Warning beats Ready; no items is Ready."""
    assert sync_plan.overall([model.State.READY, model.State.WARNING, model.State.CONFLICT]) == model.State.CONFLICT
    assert sync_plan.overall([model.State.FORBIDDEN, model.State.ERROR]) == model.State.ERROR
    assert sync_plan.overall([]) == model.State.READY


def test_an_item_is_orphaned_only_when_gone_in_every_runtime() -> None:
    """Gone in one runtime but still there in another: not yet orphaned."""

    def status(name: str, runtime: str, message: str) -> model.ItemStatus:
        return model.ItemStatus(name=name, runtime=runtime, state=model.State.READY, message=message)

    items = [
        status("old", "skr-1", "gone: nothing to delete"),
        status("old", "skr-2", "gone: nothing to delete"),
        status("half", "skr-1", "gone: nothing to delete"),
        status("half", "skr-2", "deleted"),
        status("live", "skr-1", ""),
    ]
    assert sync_plan.orphaned(items, gone="gone: ") == ["old"]
