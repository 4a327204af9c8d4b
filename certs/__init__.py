"""The runtime PKI engine and the ``kyma-certs`` command: CA stores, certificate delivery and
rotation, least-privilege module kubeconfigs. The pure issuing logic is in ``pki``."""
