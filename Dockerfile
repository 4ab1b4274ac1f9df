# The image fly.toml deploys (docs/deploy.md). Two stages: the first installs the runtime
# dependencies into a virtual environment; the second holds that environment and only the
# files that run: service.py, the packages and the static pages. No tests, docs or compilers.
# tests/test_deploy_files.py checks the command, port and user, and runs the copied files.

FROM python:3.11-slim AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml README.md service.py ./
COPY receipts receipts
COPY runtime runtime
COPY kv kv
COPY jobs jobs
COPY web web
COPY cli cli
# Install the project to resolve its dependencies from pyproject.toml, then drop the project
# itself: the final stage runs the source from /app.
RUN python -m venv /venv \
    && /venv/bin/pip install . \
    && /venv/bin/pip uninstall -y execution-proof-service

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 \
    PORT=8080
RUN groupadd --system --gid 10001 eps \
    && useradd --system --uid 10001 --gid eps --home-dir /app --no-create-home --shell /usr/sbin/nologin eps
COPY --from=deps /venv /venv
WORKDIR /app
COPY service.py ./
COPY receipts receipts
COPY runtime runtime
COPY kv kv
COPY jobs jobs
COPY web web
COPY cli cli
COPY static static
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM
# fly.toml's [processes] run `python service.py serve` (web) and `python service.py worker`.
CMD ["python", "service.py", "serve"]
