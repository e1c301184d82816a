"""The multi-host fault suite (``make chaos-hosts``): see ``bench.chaos_hosts.__main__``."""
