"""Runtime PKI and least-privilege kubeconfigs (the `kyma-certs` command)."""
