"""Runtime-id identities: the mapping follows the Kyma cache through every change, and doubt is a refusal."""

from typing import Any, cast

import pytest

from clients import informer, kube
from contract import ids, wire
from listener import errors, identities


def _kyma(name: str, runtime_id: str | None, *, version: str = "1") -> dict[str, Any]:
    labels = {wire.RUNTIME_ID_LABEL: runtime_id} if runtime_id else {}
    return {"metadata": {"name": name, "namespace": "kcp-system", "labels": labels, "resourceVersion": version}}


@pytest.fixture
def kymas() -> informer.Informer:
    # Driven by hand (listed/changed) as the list+watch loop would: no apiserver is involved.
    return informer.Informer(cast(kube.ApiClient, None), kube.KYMAS, namespace="kcp-system")


def _runtime(mapping: identities.ByRuntimeId, runtime_id: str) -> str:
    return mapping.runtime(ids.RuntimeId(runtime_id))


async def test_nothing_is_mapped_before_the_cache_listed(kymas: informer.Informer) -> None:
    mapping = identities.ByRuntimeId(kymas)
    assert mapping.unready() is not None
    with pytest.raises(errors.Unavailable):
        _runtime(mapping, "id-a")
    await kymas.listed([_kyma("kyma-a", "id-a")])
    assert mapping.unready() is None and _runtime(mapping, "id-a") == "kyma-a"


async def test_the_mapping_follows_relabelling_and_deletion(kymas: informer.Informer) -> None:
    mapping = identities.ByRuntimeId(kymas)
    await kymas.listed([_kyma("kyma-a", "id-a"), _kyma("kyma-b", "id-b")])
    await kymas.changed("MODIFIED", _kyma("kyma-a", "id-new", version="2"))
    assert _runtime(mapping, "id-new") == "kyma-a"
    with pytest.raises(errors.Forbidden, match="no Kyma"):
        _runtime(mapping, "id-a")  # the old id no longer speaks for kyma-a
    await kymas.changed("DELETED", _kyma("kyma-b", "id-b", version="3"))
    with pytest.raises(errors.Forbidden, match="no Kyma"):
        _runtime(mapping, "id-b")
    await kymas.listed([_kyma("kyma-a", "id-new")])  # a relist (410 Gone) converges to the same
    assert _runtime(mapping, "id-new") == "kyma-a"


async def test_an_id_two_kymas_carry_speaks_for_neither(kymas: informer.Informer) -> None:
    mapping = identities.ByRuntimeId(kymas)
    await kymas.listed([_kyma("kyma-a", "id-x"), _kyma("kyma-b", "id-x")])
    with pytest.raises(errors.Forbidden, match="2 Kymas carry") as refused:
        _runtime(mapping, "id-x")
    assert "kyma-a" not in refused.value.reason and "kyma-b" not in refused.value.reason
    await kymas.changed("MODIFIED", _kyma("kyma-b", None, version="2"))
    assert _runtime(mapping, "id-x") == "kyma-a"


async def test_a_kyma_name_that_is_no_runtime_name_is_a_refusal_not_a_crash(kymas: informer.Informer) -> None:
    mapping = identities.ByRuntimeId(kymas)
    await kymas.listed([_kyma("Kyma.With.Dots", "id-odd")])
    with pytest.raises(errors.Forbidden, match="id-odd"):
        _runtime(mapping, "id-odd")
