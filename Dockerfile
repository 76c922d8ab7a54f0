# gramserve GPU image: our server on top of the official vLLM image, which already carries
# CUDA, torch and vllm==0.32.0 (the version pyproject's `cuda` extra pins).
#
# Pinned by tag for readability. In production pin the digest as well, so a re-pushed tag
# can never change what runs:  FROM vllm/vllm-openai:v0.32.0@sha256:<digest>
# (`docker buildx imagetools inspect vllm/vllm-openai:v0.32.0` prints it).
#
#   docker build -t gramserve:0.1.0-cuda .
#   docker run --gpus all -p 8000:8000 -e GRAMSERVE_MODEL=Qwen/Qwen2.5-7B-Instruct \
#     -e GRAMSERVE_API_KEY=change-me -v hf-cache:/models gramserve:0.1.0-cuda
FROM vllm/vllm-openai:v0.32.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Every `gramserve serve` flag is also read from GRAMSERVE_<FLAG_UPPER_SNAKE>, so the image is
# configured with `-e`/envFrom alone (GRAMSERVE_MODEL, GRAMSERVE_TENSOR_PARALLEL_SIZE, ...).
# Caches live under /models so one volume keeps hub downloads and converted models.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRAMSERVE_HOST=0.0.0.0 \
    GRAMSERVE_PORT=8000 \
    GRAMSERVE_HOME=/models/gramserve \
    HF_HOME=/models/hf \
    HOME=/home/gramserve

WORKDIR /opt/gramserve
COPY pyproject.toml README.md ./
COPY server ./server
COPY tool_parsers ./tool_parsers
COPY reasoning_parsers ./reasoning_parsers
COPY chat_templates ./chat_templates

# vllm, torch and CUDA come from the base image. Installing under a freeze of what is already
# there lets pip add only our light dependencies and makes the build fail (rather than silently
# move vllm's pins) if one of them would need a different version.
RUN python3 -m pip list --format=freeze > /tmp/base-image.txt \
    && python3 -m pip install --no-cache-dir --constraint /tmp/base-image.txt . \
    && rm /tmp/base-image.txt \
    && gramserve serve --help > /dev/null

# Non-root at a fixed numeric id so Kubernetes `runAsNonRoot` can verify it.
RUN groupadd --system --gid 10001 gramserve \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/gramserve --create-home gramserve \
    && mkdir -p /models \
    && chown gramserve:gramserve /models
USER 10001:10001

EXPOSE 8000
VOLUME ["/models"]

# /health answers 200 only when the engine answers (503 while loading, draining or dead).
# The start period covers downloading and loading large models.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20m --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('GRAMSERVE_PORT', '8000'), timeout=4)"]

# SIGTERM makes gramserve stop accepting, drain in-flight requests (--drain-timeout) and exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["gramserve", "serve"]
CMD []
