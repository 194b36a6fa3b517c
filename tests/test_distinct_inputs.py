"""Distinct generated inputs (issue 42): every image sent is new, across users and processes, unless --image-pool N
asks for N that recur; each worker draws texts of its own; the run says what it sent."""

from __future__ import annotations

import argparse
import io
from types import SimpleNamespace
from typing import Any

import jsonschema
import orjson
import pytest
from locust.env import Environment

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.imageformats import from_data_url, read_image
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.workload import images
from poolbench_locust.workload.pool import REFERENCE_EVERY, FreshImages
from tests.support.harness import options, start_error
from tests.support.locust_run import PREFLIGHT_ON, result_schema, run_locust

SMALL_IMAGES = ("--images", "1", "--image-size", "32x32", "--input-len", "5")
TWO_PROCESSES = ("--processes", "2")


def _urls(body: bytes) -> list[str]:
    """The image data URLs of a request body, in order, whatever its form (one conversation, a batch of them)."""

    def walk(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value] if value.startswith("data:image/") else []
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        return [u for child in children for u in walk(child)]

    return walk(orjson.loads(body))


def _run(server: Any, tmp_path: Any, *args: str) -> tuple[Any, dict[str, Any]]:
    """A run of 4 users and at least 100 requests; the master's preflight request on (its image is one no worker
    sends)."""
    done = run_locust(
        "locustfiles/embeddings_chat.py",
        *args,
        users=4,
        requests=100,
        host=server.url,
        json_result=tmp_path / "run.json",
        env=PREFLIGHT_ON,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = done.json()
    jsonschema.validate(document, result_schema())  # the inputs' part of the schema merged in
    return done, document


def test_two_processes_send_as_many_distinct_images_as_requests(mock_server, tmp_path):
    done, document = _run(mock_server, tmp_path, *SMALL_IMAGES, *TWO_PROCESSES)
    seen = mock_server.stats()
    assert seen["requests"] > 64, "more requests than the two pools of 32 hold: a pool that cycled would repeat"
    assert seen["images"] == seen["requests"], "one image a request"
    assert seen["distinct_images"] == seen["images"] and seen["distinct_images_complete"]
    [chat] = document["inputs"]["classes"]
    assert chat["images"] == "new for every request" and chat["pool_requests"] == 32
    assert chat["texts"] == "each process its own" and chat["distinct_images"] is None
    assert "Inputs: EmbeddingsChatUser: a pool of 32 requests in each process" in done.stderr
    assert "images new for every request" in done.stderr


def test_image_pool_n_sends_n_distinct_images_over_and_over(mock_server, tmp_path):
    done, document = _run(mock_server, tmp_path, *SMALL_IMAGES, "--image-pool", "5", *TWO_PROCESSES)
    seen = mock_server.stats()
    assert seen["images"] > 64
    assert seen["distinct_images"] == 5, "the same five in both processes"
    [chat] = document["inputs"]["classes"]
    assert chat["images"] == "recurring" and chat["distinct_images"] == 5
    assert "5 distinct images, recurring (--image-pool)" in done.stderr


@pytest.mark.parametrize("image_format", ["png", "jpeg"])
def test_every_take_of_the_pool_is_a_new_readable_image(image_format):
    plan = plan_for(pb.EmbeddingsChatUser, options(*SMALL_IMAGES, "--image-format", image_format, "--batch-size", "2"))
    pool = plan.requests
    assert isinstance(pool, FreshImages)
    taken = [pool[i % len(pool)] for i in range(3 * len(pool))]  # three turns of the pool
    urls = [u for r in taken for u in _urls(r.body)]
    assert len(urls) == 6 * len(pool) and len(set(urls)) == len(urls), "no image twice"
    PIL = pytest.importorskip("PIL.Image", reason="Pillow (the test extra) decodes the images independently")
    pixels = set()
    for url in urls[:40]:
        data = from_data_url(url)
        assert read_image(data).format == image_format
        image = PIL.open(io.BytesIO(data))
        image.load()
        pixels.add(image.convert("RGB").tobytes())
    assert len(pixels) == 40, "distinct in their pixels too: a server hashing pixels sees each anew"
    for request, template in zip(taken, pool, strict=False):  # the same request in all else
        assert (request.sequences, request.client_tokens, request.expected_items) == (
            template.sequences,
            template.client_tokens,
            template.expected_items,
        )
        assert len(request.body) == len(template.body) or image_format == "jpeg"


def test_a_request_that_carries_a_reference_is_sent_as_prepared_one_take_in_a_few(monkeypatch):
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")  # the suite turns it off (tests/conftest.py)
    plan = plan_for(pb.EmbeddingsChatUser, options(*SMALL_IMAGES))
    pool = plan.requests
    assert isinstance(pool, FreshImages) and plan.references, "the consistency check chose reference inputs"
    carrying = next(i for i, r in enumerate(pool) if r.refs)
    takes = [pool[carrying] for _ in range(2 * REFERENCE_EVERY)]
    prepared = [i for i, r in enumerate(takes) if r.body == list.__getitem__(pool, carrying).body]
    assert prepared == [0, REFERENCE_EVERY], "as prepared, with its reference, one take in REFERENCE_EVERY"
    assert all(takes[i].refs for i in prepared) and not any(r.refs for i, r in enumerate(takes) if i not in prepared)
    fresh = [u for i, r in enumerate(takes) if i not in prepared for u in _urls(r.body)]
    assert len(set(fresh)) == len(fresh) == 2 * REFERENCE_EVERY - 2, "new images, and no comparison, the others"
    assert pool.carrying == len([r for r in pool if r.refs]) / REFERENCE_EVERY, "what the comparison budget counts"


def _environment(worker: int) -> Environment:
    environment = Environment(user_classes=[pb.EmbeddingsUser], parsed_options=options("--input-len", "8"))
    environment.runner = SimpleNamespace(worker_index=worker)  # type: ignore[assignment]
    return environment


def test_each_worker_draws_texts_of_its_own_and_worker_0_those_of_a_process_alone():
    alone = plan_for(pb.EmbeddingsUser, options("--input-len", "8"))
    pools = [plan_for(pb.EmbeddingsUser, e.parsed_options, None, e).requests for e in map(_environment, (0, 1, 2))]
    texts = [{t for r in pool for t in orjson.loads(r.body)["input"]} for pool in pools]
    assert [r.body for r in pools[0]] == [r.body for r in alone.requests], "a seed keeps its requests"
    assert not texts[0] & texts[1] and not texts[1] & texts[2] and not texts[0] & texts[2]


def test_the_requests_that_carry_a_reference_are_the_same_in_every_worker(monkeypatch):
    # the master compares the workers' references by input, and a reference file holds one run's inputs
    monkeypatch.setenv("LOCUST_NO_CONSISTENCY", "false")
    plans = [plan_for(pb.EmbeddingsUser, e.parsed_options, None, e) for e in map(_environment, (0, 1))]
    assert plans[0].reference_inputs and plans[0].reference_inputs == plans[1].reference_inputs
    carrying = [[r.body for r in plan.requests if r.refs] for plan in plans]
    assert carrying[0] == carrying[1]
    others = [{r.body for r in plan.requests if not r.refs} for plan in plans]
    assert not others[0] & others[1], "the rest are each worker's own"


def test_the_images_of_two_workers_differ_and_image_pool_makes_them_the_same():
    def first_urls(worker: int, *extra: str) -> set[str]:
        environment = _environment(worker)
        environment.user_classes = [pb.EmbeddingsChatUser]
        environment.parsed_options = options(*SMALL_IMAGES, *extra)
        pool = plan_for(pb.EmbeddingsChatUser, environment.parsed_options, None, environment).requests
        return {u for i in range(len(pool)) for u in _urls(pool[i].body)}

    assert not first_urls(0) & first_urls(1)
    assert first_urls(0, "--image-pool", "3") == first_urls(1, "--image-pool", "3")
    assert len(first_urls(1, "--image-pool", "3")) == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [("-1", "--image-pool: must be a whole number >= 0, got -1"), ("many", "--image-pool: must be a whole number")],
)
def test_bad_image_pool_values_stop_the_run_at_start_naming_the_option(value, expected):
    with pytest.raises(OptionError, match=f"^{expected}"):
        Settings.from_options(argparse.Namespace(**{**vars(options(*SMALL_IMAGES)), "image_pool": value}))


def test_image_pool_without_images_is_refused_and_the_command_line_names_it(tmp_path):
    assert start_error(pb.EmbeddingsChatUser, "--image-pool", "4") == (
        "--image-pool: sets how many generated images recur: give --images too"
    )
    done = run_locust("locustfiles/embeddings_chat.py", "--images", "1", "--image-pool", "-2", run_time="1s")
    assert done.returncode == 2 and "--image-pool: must be a whole number >= 0, got -2" in done.stderr


def test_a_tiny_image_says_how_many_distinct_images_it_holds():
    numbers = images.ImageNumbers(Settings(images=1, image_size=(1, 1), image_format="jpeg"))
    assert numbers.distinct() == 256, "one 8x8 block: one byte of number"
    assert images.ImageNumbers(Settings(images=1)).distinct() is None
