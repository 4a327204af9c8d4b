"""The change-detection agent that runs in every runtime (SKR).

Pipeline, leader only:  sources (list+watch per resource) -> noise filter -> coalescing queue
-> senders (mTLS POST to the listener, at-least-once) -> delivered-state checkpoint.
Every pod of the DaemonSet runs the agent; a coordination.k8s.io Lease picks the one that sends.
"""
