"""The reconciler: the scheduled sweep (``stage``), unknown effects (``_effects``), tool jobs
polled to their end (``_job_polls``), webhook deliveries (``_webhooks``)."""
