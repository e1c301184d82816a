"""The reconciler: the scheduled sweep (``stage``), unknown effects (``effects``), tool jobs
polled to their end (``job_polls``), webhook deliveries (``webhooks``)."""
