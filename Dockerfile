# One image for every worker role; the role is chosen by the command.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY runner ./runner
COPY tools ./tools
COPY broker ./broker
COPY ledger ./ledger
COPY warrant ./warrant
# the demo distribution too: `warrant demo` and WARRANT_TOOLS=warrant_demo:plugin work in the image
COPY examples/demo_plugin ./examples/demo_plugin
RUN pip install --no-cache-dir . ./examples/demo_plugin
# Every path a compose volume is mounted on exists and belongs to `warrant`: Docker copies an
# image directory's ownership into a new named volume, which would otherwise be root's.
RUN useradd --create-home warrant \
    && mkdir -p /data \
    && chown warrant:warrant /data
USER warrant
ENTRYPOINT ["warrant"]
CMD ["--help"]
