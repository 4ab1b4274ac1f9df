# The image fly.toml deploys (docs/deploy.md). Two stages: the first installs the project with
# its server extra (pip install '.[server]', a real install: the wheel's copy of the code,
# pages and static files) into a virtual environment; the second holds only that environment.
# No source tree, tests, docs or compilers. tests/test_deploy_files.py checks the command,
# port and user, and runs what the first stage builds.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml README.md ./
COPY execution_proof execution_proof
RUN python -m venv /venv && /venv/bin/pip install '.[server]'

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 \
    PORT=8080
RUN groupadd --system --gid 10001 eps \
    && useradd --system --uid 10001 --gid eps --home-dir /app --no-create-home --shell /usr/sbin/nologin eps
COPY --from=build /venv /venv
WORKDIR /app
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM
# fly.toml's [processes] run `execution-proof serve` (web) and `execution-proof worker`.
CMD ["execution-proof", "serve"]
