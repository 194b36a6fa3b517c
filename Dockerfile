# poolbench-locust on Locust's own image: `docker run IMAGE -f locustfiles/embeddings.py --host ...`
# behaves like `locust` does. Build from the repository root:
#
#   docker build -t poolbench-locust:0.1.0 .
#
# Two stages. The build stage is Locust's image with a C compiler added: it builds the package's wheel,
# lazyjson's C pass (_jsonscan) compiled in, for the very Python and C library the image runs. The image
# itself (the last stage) is Locust's image with that wheel installed and no compiler: without the pass,
# large float answers would be validated by simdjson at about three times the client CPU.
# The build fetches the package's build backend, gcc and orjson from PyPI and Debian; the image needs no
# network at run time (the target server aside). The Kubernetes manifests in k8s/ run this image.
ARG LOCUST_VERSION=2.47.0

FROM locustio/locust:${LOCUST_VERSION} AS build
USER root
# Locust's image is Debian's slim Python: the headers are its own, gcc and the C library's headers are Debian's.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /tmp/poolbench-src/
COPY poolbench_locust/ /tmp/poolbench-src/poolbench_locust/
# The extension is optional in pyproject.toml (an install without a compiler still works): here its
# absence fails the build, rather than ship an image that validates with simdjson.
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/wheels /tmp/poolbench-src \
    && python -m zipfile -l /tmp/wheels/poolbench_locust-*.whl | grep -q 'poolbench_locust/_jsonscan\..*so '

FROM locustio/locust:${LOCUST_VERSION}
ARG LOCUST_VERSION
ARG ORJSON_VERSION=3.13.0

# Locust's image installs into a virtualenv that may not belong to its user: install as root, run as locust.
USER root
COPY --from=build /tmp/wheels/ /tmp/wheels/
# Naming locust again pins it: pip would otherwise be free to move it within the package's range.
# The C pass must load here, in an image without a compiler (the wheel's, not one built now).
# k8s/ runs the pods as uid:gid 1000:1000 (runAsNonRoot needs numbers): the build fails if locust is not that user.
RUN python -m pip install --no-cache-dir /tmp/wheels/poolbench_locust-*.whl \
        "locust==${LOCUST_VERSION}" "orjson==${ORJSON_VERSION}" \
    && python -m pip check \
    && rm -rf /tmp/wheels \
    && ! command -v gcc && ! command -v cc \
    && python -c 'from poolbench_locust import lazyjson; assert lazyjson.validator() == "c", lazyjson.validator()' \
    && test "$(id -u locust):$(id -g locust)" = "1000:1000"

USER locust
WORKDIR /home/locust
COPY locustfiles/ locustfiles/
ENV PYTHONUNBUFFERED=1
EXPOSE 8089 5557
# Locust's own entrypoint, stated again so that this file says what the container runs.
ENTRYPOINT ["locust"]
