"""Names the engines agree on without importing each other: paths, stream, field manager, labels.

Each of these is read by one engine and written by another (the watcher posts to the listener's
path, drops writes made under the reconciler's field manager, selects what the reconciler
labelled; the reconciler finds the kubeconfig Secrets kyma-certs writes). Renaming one here
renames it for all of them; a literal copy elsewhere would silently break the loop guard.
"""

EVENTS_PATH = "/v1/events"
"""Where watchers POST change events on the listener."""
HEARTBEAT_PATH = "/v1/heartbeat"
"""Where the active watcher of a runtime POSTs its heartbeat: a broken watcher is detected in KCP by
its silence (the listener exports the last heartbeat per runtime)."""

STREAM_NAME = "KYMA_EVENTS"
"""The JetStream stream capturing every event subject."""
DEDUP_WINDOW_SECONDS = 120.0
"""The watcher's retry horizon and JetStream's duplicate window. When the listener published an
event but the watcher never got the answer, the watcher sends it again within two request
timeouts (one immediate resend on a closed connection) plus its longest backoff, which its
configuration keeps inside this window, so such a retry is deduplicated. A repeat later than
that (after a long outage, or a relist after a restart) is stored again; consumers are
idempotent, so it costs a reconcile, not correctness."""
DEAD_LETTER_STREAM_NAME = "KYMA_DEAD_LETTERS"
"""The JetStream stream keeping events no consumer could handle, for people to look at."""
DEAD_LETTER_REASON_HEADER = "Kyma-Dead-Letter-Reason"
ORIGINAL_SUBJECT_HEADER = "Kyma-Original-Subject"
DELIVERIES_HEADER = "Kyma-Deliveries"
"""Headers of a dead letter: why, where it was first published, how often it was delivered."""

RECONCILER_FIELD_MANAGER = "kyma-sync-reconciler"
"""The field manager of every reconciler write; watchers drop changes made under it."""
RELEASED_FIELD_MANAGER = "kyma-sync-released"
"""Who owns the fields of an object a SyncResource let go without deleting it (deletePolicy Orphan): the reconciler's
entries are renamed to it, so no later apply of ours (adopting the object again) removes what the first item set."""
RECONCILER_EVENT_SOURCE = "kyma-sync-reconciler"
"""The source component of the Kubernetes Events the reconciler records in KCP (as kubectl describe shows them);
the same name as the field manager, but a different contract: one may change without the other."""

SYNC_MODULE = "kyma-sync"
"""The module of kyma-sync's own reconcilers: events of synced objects, their kubeconfigs."""

SYNCED_LABEL = "kyma-project.io/synced-by"
SYNCED_VALUE = "kyma-sync"
SYNCED_SELECTOR = f"{SYNCED_LABEL}={SYNCED_VALUE}"
"""Carried by everything the reconcilers write into a runtime, so watchers can select it."""

OWNER_ANNOTATION = "sync.kyma-project.io/owner"
"""``<SyncResource uid>/<item name>`` on every object a SyncResource applied: the only proof
that the object is ours to change or delete."""
SOURCE_ANNOTATION = "sync.kyma-project.io/source"
"""``<namespace>/<name>`` of the owning SyncResource, for people reading the object."""

KCP_NAMESPACE = "kcp-system"
"""Where KCP keeps Kyma CRs and the runtimes' master kubeconfig Secrets."""
KUBECONFIG_NAMESPACE = "kyma-sync-kubeconfigs"
"""Where minted module kubeconfigs go: apart from the master kubeconfigs, so that reading them
(the reconcilers may) never grants reading a master kubeconfig (only kyma-certs may)."""
RUNTIME_LABEL = "kyma-project.io/runtime"
BETA_LABEL = "operator.kyma-project.io/beta"
INTERNAL_LABEL = "operator.kyma-project.io/internal"
"""On a ModuleTemplate ("true"): it goes only to runtimes whose Kyma carries the same label "true"."""
MIRROR_OPT_OUT_LABEL = "kyma-project.io/skip-mirror"
"""On a runtime object of a mirrored kind: not mirrored (the watchers' selector is its absence)."""
RUNTIME_MODULES_ANNOTATION = "kyma-project.io/runtime-modules"
"""On KCP's Kyma: JSON list of every module its runtime has, {name, source: kcp|runtime}. An annotation, not a
status field: lifecycle-manager's structural Kyma status schema would prune a field it does not know."""
WATCHER_STATE_ANNOTATION = "kyma-project.io/watcher-state"
"""On KCP's Kyma: JSON {state: Ready|Unreachable|Error, message} of the watcher KCP installs in its runtime."""
RUNTIME_KYMA_FINALIZER = "kyma-project.io/kyma-sync"
"""On the runtime's Kyma CR: a user's deletion is seen (and answered by recreating it), not just suffered."""
RECORDS_OF_LABEL = "sync.kyma-project.io/records-of"
"""On a SyncRecord: the uid of the SyncResource whose records it holds."""
SOURCE_SECRET_LABEL = "sync.kyma-project.io/source"
"""On a KCP Secret: it may be referenced by SyncResource items (secretRef) of its namespace; opt-in."""
SOURCE_SECRET_SELECTOR = f"{SOURCE_SECRET_LABEL}=true"
KYMA_NAME_LABEL = "operator.kyma-project.io/kyma-name"
"""The runtime (Kyma name) an object is about: on a runtime's master kubeconfig Secret in KCP (how the
Kyma control plane finds it), and on a single-runtime SyncResource (so module managers can list by runtime)."""
RUNTIME_ID_LABEL = "kyma-project.io/runtime-id"
"""The runtime id the Kyma control plane gives a runtime (on its Kyma CR and master kubeconfig Secret);
upstream lifecycle-manager issues runtime certificates with it as the identity."""
MODULE_LABEL = "kyma-project.io/module"
KUBECONFIG_KEY = "config"


def master_kubeconfig_secret(runtime: str) -> str:
    """How our local landscapes name a master kubeconfig Secret (KCP finds it by its label, not its name)."""
    return f"kubeconfig-{runtime}"


def module_kubeconfig_secret(module: str, runtime: str) -> str:
    return f"{module}-kubeconfig-{runtime}"
