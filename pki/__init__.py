"""The runtime PKI as pure data: CA, certificates, runtime identity, kubeconfig documents.

Nothing here touches the disk, the network or a cluster: issuing and checking certificates is
the same code for the ``kyma-certs`` engine (which stores and delivers them), the listener
(which checks a runtime's identity against the trust bundle), the dev landscape and the tests.
"""
