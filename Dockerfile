# One image for every tirtune role: API, Ray head (CPU builders) and GPU worker.
# nvcc is needed wherever builds run; the CUDA devel image carries it and the driver stub.
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/tirtune PATH=/opt/tirtune/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/tirtune
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tirtune ./tirtune
RUN pip install ".[gpu]"
EXPOSE 8000
# Serving 0.0.0.0 needs TIRTUNE_API_TOKEN (or --allow-no-token): `tirtune serve` refuses otherwise.
CMD ["tirtune", "serve", "--host", "0.0.0.0", "--port", "8000"]
