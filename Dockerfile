# One image for every role: `agent-runtime api`, `agent-runtime worker`, `agent-runtime migrate`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOST=0.0.0.0 \
    PORT=8000 \
    LOG_JSON=true \
    AGENT_RUNTIME_DATA_DIR=/data

WORKDIR /app
# bubblewrap is the code tools' sandbox (app/tools/sandbox/). The server runs as `app`, so bwrap
# works through an unprivileged user namespace: setuid is stripped (a setuid bwrap could not run
# under no-new-privileges anyway), and the container must allow user namespaces, mounting a
# fresh /proc and mount(2) in them: see deploy/docker/, deploy/k8s/ and docs/deployment.md.
# `/readyz` says whether the sandbox works (`sandbox.available`, `sandbox.reason`).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && chmod u-s /usr/bin/bwrap \
    && bwrap --version && prlimit --version
RUN useradd --create-home --uid 10001 app && mkdir -p /data && chown app:app /data

# Dependencies first (cached while only the code changes): install a stub package with the real
# pyproject.toml, then the code. Editable, because migrations/ and alembic.ini live beside app/.
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py && pip install -e . && rm -rf app
COPY alembic.ini ./
COPY migrations ./migrations
COPY app ./app
RUN pip install --no-deps -e .

USER app
EXPOSE 8000
CMD ["agent-runtime", "api"]
