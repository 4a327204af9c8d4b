"""Kinds in configuration and policy, however people write them."""

import pydantic
import pytest

from reconciler import kinds, settings


@pytest.mark.parametrize(
    ("text", "group", "name"),
    [
        pytest.param("v1/Secret", "", "secret", id="version-kind"),
        pytest.param("Secret", "", "secret", id="kind"),
        pytest.param("secrets", "", "secrets", id="plural"),
        pytest.param("core/v1/Secret", "", "secret", id="core-group"),
        pytest.param(
            "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
            "rbac.authorization.k8s.io",
            "clusterrolebinding",
            id="gvk",
        ),
        pytest.param("apps/Deployment", "apps", "deployment", id="group-kind"),
    ],
)
def test_parse(text: str, group: str, name: str) -> None:
    """Every accepted spelling means group + lower-cased name."""
    assert kinds.GroupKind.parse(text) == kinds.GroupKind(group, name)


@pytest.mark.parametrize("text", ["v1/Secret/extra/more", "", "v1/", "Bad_Kind", "UPPER.Group/v1/Kind", "a/b/c"])
def test_parse_refuses_what_it_cannot_read(text: str) -> None:
    """Garbage is a clear error, never a rule that silently matches nothing."""
    with pytest.raises(ValueError):
        kinds.GroupKind.parse(text)


@pytest.mark.parametrize("rule", ["v1/Secret", "secrets", "Secret", "secret"])
def test_a_rule_matches_kind_plural_and_singular_of_any_version(rule: str) -> None:
    """v1/Secret, secrets, Secret: all match a Secret known as secrets/secret."""
    assert kinds.GroupKind.parse(rule).matches("", "Secret", "secrets", "secret")
    assert not kinds.GroupKind.parse(rule).matches("example.com", "Secret", "secrets", "secret")


def test_restricted_kinds_are_validated_at_start() -> None:
    """A typo in restricted_kinds stops the reconciler at start instead of restricting nothing."""
    with pytest.raises(pydantic.ValidationError, match="not \\[group/\\]\\[version/\\]Kind"):
        settings.SyncResourcesSettings(restricted_kinds=("v1/Secret/oops/x",))
