"""Small building blocks shared by the components: interruptible waits, backoff, config files."""
