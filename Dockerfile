# poolbench-locust on Locust's own image: `docker run IMAGE -f locustfiles/embeddings.py --host ...`
# behaves like `locust` does. Build from the repository root:
#
#   docker build -t poolbench-locust:0.1.0 .
#
# The build fetches the package's build backend and orjson from PyPI; the image needs no network at
# run time (the target server aside). The Kubernetes manifests in k8s/ run this image.
ARG LOCUST_VERSION=2.47.0
FROM locustio/locust:${LOCUST_VERSION}
ARG LOCUST_VERSION
ARG ORJSON_VERSION=3.13.0

# Locust's image installs into a virtualenv that may not belong to its user: install as root, run as locust.
USER root
COPY pyproject.toml README.md /tmp/poolbench-src/
COPY poolbench_locust/ /tmp/poolbench-src/poolbench_locust/
# Naming locust again pins it: pip would otherwise be free to move it within the package's range.
# k8s/ runs the pods as uid:gid 1000:1000 (runAsNonRoot needs numbers): the build fails if locust is not that user.
RUN python -m pip install --no-cache-dir /tmp/poolbench-src \
        "locust==${LOCUST_VERSION}" "orjson==${ORJSON_VERSION}" \
    && python -m pip check \
    && rm -rf /tmp/poolbench-src \
    && test "$(id -u locust):$(id -g locust)" = "1000:1000"

USER locust
WORKDIR /home/locust
COPY locustfiles/ locustfiles/
ENV PYTHONUNBUFFERED=1
EXPOSE 8089 5557
# Locust's own entrypoint, stated again so that this file says what the container runs.
ENTRYPOINT ["locust"]
