#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy into a per-user cache.
#
# k8s.io/kubernetes replaces its staging modules with ./staging paths, so `go install` cannot
# build it directly. A throwaway wrapper module requires it and points every staging module at
# its published v0.x release; etcd comes from the same module graph, so the versions match.
#
# Usage: build-testbin.sh K8S_VERSION OUT_DIR     (e.g. v1.34.4 ~/.cache/kyma-sync/testbin/v1.34.4)
set -euo pipefail
command -v go >/dev/null || { echo "testbin: Go is required to build kube-apiserver and etcd" >&2; exit 1; }

version=${1:?usage: build-testbin.sh K8S_VERSION OUT_DIR}
out_dir=${2:?usage: build-testbin.sh K8S_VERSION OUT_DIR}
staging_version="v0.${version#v1.}"
work=$(mktemp -d "${TMPDIR:-/tmp}/kyma-sync-testbin.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "testbin: resolving k8s.io/kubernetes@$version" >&2
gomod=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$version" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or sys.exit(d.get("Error", "no GoMod")))')

{
  echo "module kymasync.local/testbin"
  echo
  echo "go $(awk '/^go /{print $2; exit}' "$gomod")"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$gomod" \
    | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
} > "$work/go.mod"

cat > "$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
GO

cd "$work"
echo "testbin: go mod tidy" >&2
GOFLAGS=-mod=mod go mod tidy
mkdir -p "$out_dir.partial"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$(echo "${version#v1.}" | cut -d. -f1)"
echo "testbin: building kube-apiserver $version (10-20 min cold on 2 cores)" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out_dir.partial/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "testbin: building etcd" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out_dir.partial/etcd" go.etcd.io/etcd/server/v3
rm -rf "$out_dir"
mv "$out_dir.partial" "$out_dir"
echo "testbin: ready in $out_dir" >&2
