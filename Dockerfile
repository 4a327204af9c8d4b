# One image, five entrypoints: kyma-watcher, kyma-listener, kyma-reconciler, kyma-certs, kyma-eventbus.
# The charts pick the entrypoint with `command:`.
FROM python:3.11-slim AS build
RUN python -m venv /opt/kyma-sync
COPY pyproject.toml README.md /src/
COPY contract /src/contract
COPY clients /src/clients
COPY kit /src/kit
COPY observability /src/observability
COPY pki /src/pki
COPY certs /src/certs
COPY eventbus /src/eventbus
COPY watcher /src/watcher
COPY listener /src/listener
COPY reconciler /src/reconciler
COPY devenv /src/devenv
RUN /opt/kyma-sync/bin/pip install --no-cache-dir /src

FROM python:3.11-slim
COPY --from=build /opt/kyma-sync /opt/kyma-sync
ENV PATH=/opt/kyma-sync/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
CMD ["kyma-listener", "--help"]
