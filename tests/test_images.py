"""Images as inputs (issue 31): generated images, each server's form, the mock's decoding, a dataset's images,
and what stops a run at start."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

import poolbench_locust as pb
from poolbench_locust.engine.plan import plan_for
from poolbench_locust.imageformats import from_data_url, read_image
from poolbench_locust.options import OptionError, Settings
from poolbench_locust.workload import images, pool
from poolbench_locust.workload.datasets import load_file
from tests.support.bad_then_good import assert_failed_then_ok
from tests.support.harness import Run, failure_text, options
from tests.support.hostile import response
from tests.support.locust_run import run_locust

PIL = pytest.importorskip("PIL.Image", reason="Pillow (the test extra) decodes the generated images independently")

SMALL = ("--images", "2", "--image-size", "40x24", "--batch-size", "2", "--documents", "3", "--input-len", "5")


def _decoded(data: bytes) -> Any:
    image = PIL.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize("image_format", ["png", "jpeg"])
@pytest.mark.parametrize("size", [(512, 512), (13, 29), (1, 1)])
def test_generated_images_are_reproducible_distinct_and_readable(image_format, size):
    encode = images.ENCODERS[image_format]
    made = [encode(7, i, *size) for i in range(6)]
    assert made == [encode(7, i, *size) for i in range(6)], "the same seed makes the same bytes"
    assert len(set(made)) == 6, "every image of a run is distinct"
    if size != (1, 1):  # one pixel holds the image's number and nothing of the seed
        assert encode(8, 0, *size) != made[0], "another seed, another image"
    pixels = set()
    for data in made:
        image = _decoded(data)  # an independent decoder reads every one
        assert image.size == size and image.format == image_format.upper()
        info = read_image(data)
        assert (info.format, info.width, info.height) == (image_format, *size)
        pixels.add(image.convert("RGB").tobytes())
    assert len(pixels) == 6, "distinct in their pixels, not only their bytes: a server hashing pixels sees each anew"


def _parts(value: Any) -> list[dict[str, Any]]:
    assert isinstance(value, list)
    return value


def _urls(parts: list[dict[str, Any]]) -> list[str]:
    return [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]


def _text_then_images(parts: list[dict[str, Any]], count: int) -> list[str]:
    assert parts[0]["type"] == "text" and parts[0]["text"]
    assert [p["type"] for p in parts[1:]] == ["image_url"] * count
    return _urls(parts)


def _form_images(user: str, body: dict[str, Any]) -> list[str]:
    """The image URLs of one request body, asserting it is in the form its server takes (WIRE.md)."""
    if user == "EmbeddingsChatUser":  # --batch-size 2: a list of 2 conversations (vLLM 0.34), images in each
        assert "input" not in body and len(body["messages"]) == 2
        assert all(len(c) == 1 for c in body["messages"])
        return [u for c in body["messages"] for u in _text_then_images(_parts(c[0]["content"]), 2)]
    if user == "PoolingUser":  # one conversation: a user message per text
        assert "input" not in body and len(body["messages"]) == 2
        return [u for m in body["messages"] for u in _text_then_images(_parts(m["content"]), 2)]
    if user == "RerankUser":  # vLLM: {"content": [parts]} documents
        return [u for d in body["documents"] for u in _text_then_images(d["content"], 2)]
    if user == "ScoreUser":
        return [u for d in body["text_2"] for u in _text_then_images(d["content"], 2)]
    if user == "SGLangRerankUser":  # SGLang: a bare list of parts per document
        return [u for d in body["documents"] for u in _text_then_images(d, 2)]
    if user == "CohereEmbedUser":  # /v2/embed inputs, not texts
        assert "texts" not in body
        return [u for i in body["inputs"] for u in _text_then_images(i["content"], 2)]
    assert user == "InfinityEmbeddingsUser"  # modality image: each input an image, the texts not sent
    assert body["modality"] == "image"
    return body["input"]


FORMS = [
    ("EmbeddingsChatUser", "vllm", 2, "expected 2 embeddings, got 1"),
    ("PoolingUser", "vllm", 1, "expected 1 embeddings, got 0"),
    ("RerankUser", "vllm", 3, "expected 3 results, got 2"),
    ("ScoreUser", "vllm", 3, "expected 3 results, got 2"),
    ("SGLangRerankUser", "sglang", 3, "expected 3 results, got 2"),
    ("CohereEmbedUser", "vllm", 2, "expected 2 embeddings, got 1"),
    ("InfinityEmbeddingsUser", "infinity", 4, "expected 4 embeddings, got 3"),
]


@pytest.mark.parametrize(("user", "flavor", "sequences", "one_too_few"), FORMS, ids=[f[0] for f in FORMS])
def test_each_server_form_is_sent_and_answered(mock_server, user, flavor, sequences, one_too_few):
    user_class = getattr(pb, user)
    run = Run(user_class, mock_server.url, *SMALL, "--image-format", "jpeg", mock_headers={"x-mock-flavor": flavor})
    assert run.user.plan is not None
    urls = [u for r in run.user.plan.requests for u in _form_images(user, orjson.loads(r.body))]
    assert len(urls) == len(set(urls)), "no image is sent twice in a pool"
    first = read_image(from_data_url(urls[0]))
    assert (first.format, first.width, first.height) == ("jpeg", 40, 24)
    ok = run.one()
    assert ok["exception"] is None, failure_text(ok)
    assert ok["context"]["sequences"] == sequences
    # The mock answering one vector (result) too few: exactly one failed request saying so.
    hostile = Run(
        user_class, mock_server.url, *SMALL, mock_headers={"x-mock-flavor": flavor, "x-mock-fault": "fewer-embeddings"}
    )
    failed = hostile.one()
    assert one_too_few in failure_text(failed)
    assert "input_tokens" not in failed["context"]


def test_cohere_image_tokens_are_read_into_the_request_context(mock_server):
    run = Run(pb.CohereEmbedUser, mock_server.url, *SMALL, mock_headers={"x-mock-flavor": "cohere"})
    event = run.one()
    assert event["exception"] is None, failure_text(event)
    # 2 inputs x 2 images of 40x24: the mock bills 2 x 1 tiles of 32x32 each
    assert event["context"]["image_tokens"] == 8


def test_a_bad_cohere_image_token_count_is_one_failure():
    def answer(image_tokens: Any) -> bytes:
        meta = {"billed_units": {"input_tokens": 4, "image_tokens": image_tokens}}
        return response(200, orjson.dumps({"id": "x", "embeddings": {"float": [[0.5, 0.25]] * 2}, "meta": meta}))

    message = assert_failed_then_ok(
        pb.CohereEmbedUser, answer(-3), answer(2), "image_tokens is negative", "--images", "1"
    )
    assert "meta.billed_units.image_tokens" in message


def test_the_vllm_form_family_runs_clean_under_locust(mock_server, tmp_path):
    locustfile = tmp_path / "images_locustfile.py"
    locustfile.write_text(
        "from poolbench_locust import CohereEmbedUser, EmbeddingsChatUser, PoolingUser, RerankUser, ScoreUser  # noqa\n"
    )
    done = run_locust(
        locustfile, *SMALL, headless=True, users=5, requests=50, host=mock_server.url, csv=tmp_path / "run"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = done.csv("stats")
    for route in ("/v1/embeddings", "/pooling", "/rerank", "/score", "/v2/embed"):
        assert int(rows[route]["Request Count"]) > 0 and rows[route]["Failure Count"] == "0", (route, rows[route])


def _post(url: str, body: Any) -> requests.Response:
    return requests.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}, timeout=5)


def test_the_mock_decodes_every_image_and_refuses_an_unreadable_one(mock_server):
    good = images.png(1, 0, 16, 16)
    broken = good[:-30] + good[-12:]  # the zlib data cut short
    for data, expected in [(good, None), (b"GIF89a....", "not a PNG or JPEG"), (broken, "PNG")]:
        url = "data:image/png;base64," + base64.b64encode(data).decode()
        parts = [{"type": "text", "text": "a cat"}, {"type": "image_url", "image_url": {"url": url}}]
        answer = _post(f"{mock_server.url}/v1/embeddings", {"messages": [{"role": "user", "content": parts}]})
        if expected is None:
            assert answer.status_code == 200 and len(answer.json()["data"]) == 1
        else:
            assert answer.status_code == 400, answer.text
            assert "failed to load the image" in answer.text and expected in answer.text


def test_images_on_a_class_whose_server_takes_none_stop_the_run_at_start():
    with pytest.raises(OptionError) as refused:
        plan_for(pb.TEIEmbedUser, options("--images", "1"), "http://127.0.0.1:9")
    assert refused.value.option == "--images"
    assert "TEIEmbedUser (/embed) cannot send images" in str(refused.value)


def _write_png(path: Path, index: int = 0) -> bytes:
    data = images.png(3, index, 20, 10)
    path.write_bytes(data)
    return data


def test_a_jsonl_dataset_sends_its_images_and_names_a_bad_one_with_its_line(tmp_path):
    (tmp_path / "pics").mkdir()
    first = _write_png(tmp_path / "pics" / "a.png")
    (tmp_path / "data.jsonl").write_text(
        '{"text": "a cat", "image": "pics/a.png"}\n{"image": ["pics/a.png", "https://example.invalid/b.jpg"]}\n'
    )
    plan = plan_for(pb.CohereEmbedUser, options("--dataset", f"file:{tmp_path / 'data.jsonl'}"), "http://127.0.0.1:9")
    bodies = [orjson.loads(r.body) for r in plan.requests[:2]]
    sent = [c for b in bodies for i in b["inputs"] for c in i["content"]]
    assert sent[0] == {"type": "text", "text": "a cat"}
    assert from_data_url(sent[1]["image_url"]["url"]) == first, "a file relative to the dataset, sent as it is"
    assert sent[3]["image_url"]["url"] == "https://example.invalid/b.jpg", "a URL goes as is, to the server to fetch"

    (tmp_path / "pics" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    (tmp_path / "bad.jsonl").write_text(
        '{"text": "ok", "image": "pics/a.png"}\n{"text": "x", "image": "pics/bad.png"}\n'
    )
    with pytest.raises(OptionError) as refused:
        plan_for(pb.CohereEmbedUser, options("--dataset", f"file:{tmp_path / 'bad.jsonl'}"), "http://127.0.0.1:9")
    message = str(refused.value)
    assert refused.value.option == "--dataset"
    assert f"{tmp_path / 'bad.jsonl'}:2" in message and "bad.png is not a readable PNG or JPEG" in message


def test_a_folder_of_images_is_a_dataset_of_images_alone(tmp_path):
    made = [_write_png(tmp_path / f"{i}.png", i) for i in range(3)]
    plan = plan_for(pb.InfinityEmbeddingsUser, options("--dataset", f"file:{tmp_path}"), "http://127.0.0.1:9")
    body = orjson.loads(plan.requests[0].body)
    assert body["modality"] == "image" and from_data_url(body["input"][0]) == made[0]
    chat = orjson.loads(plan_for(pb.EmbeddingsChatUser, options("--dataset", f"file:{tmp_path}")).requests[1].body)
    assert [p["type"] for p in chat["messages"][0]["content"]] == ["image_url"], "an image alone: no empty text part"

    (tmp_path / "z.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(OptionError, match=r"z\.jpg is not a readable PNG or JPEG"):
        plan_for(pb.InfinityEmbeddingsUser, options("--dataset", f"file:{tmp_path}"), "http://127.0.0.1:9")


def test_dataset_images_on_a_class_without_images_or_beside_images_stop_at_start(tmp_path):
    _write_png(tmp_path / "a.png")
    (tmp_path / "data.jsonl").write_text('{"text": "a cat", "image": "a.png"}\n')
    dataset = ("--dataset", f"file:{tmp_path / 'data.jsonl'}")
    with pytest.raises(OptionError, match=r"^--dataset: its records hold images, which /v1/embeddings does not take"):
        plan_for(pb.EmbeddingsUser, options(*dataset))
    with pytest.raises(OptionError, match=r"^--images: the dataset brings its own images"):
        plan_for(pb.CohereEmbedUser, options(*dataset, "--images", "1"))


def test_a_chat_record_sends_its_image_beside_its_last_user_message(tmp_path):
    made = _write_png(tmp_path / "a.png")
    record = {"messages": [{"role": "system", "content": "Embed it."}, {"role": "user", "content": "a cat"}]}
    (tmp_path / "chat.jsonl").write_text(orjson.dumps({**record, "image": "a.png"}).decode() + "\n")
    plan = plan_for(pb.EmbeddingsChatUser, options("--dataset", f"file:{tmp_path / 'chat.jsonl'}"))
    system, user = orjson.loads(plan.requests[0].body)["messages"]
    assert system == {"role": "system", "content": "Embed it."}
    assert user["role"] == "user" and user["content"][0] == {"type": "text", "text": "a cat"}
    assert from_data_url(user["content"][1]["image_url"]["url"]) == made


def test_the_pool_stops_growing_at_its_byte_bound(monkeypatch):
    full = plan_for(pb.EmbeddingsChatUser, options("--images", "4", "--image-size", "64x64"))
    assert len(full.requests) == 32
    monkeypatch.setattr(pool, "POOL_BYTES", 3 * len(full.requests[0].body))
    bounded = plan_for(pb.EmbeddingsChatUser, options("--images", "4", "--image-size", "64x64"))
    assert 3 <= len(bounded.requests) <= 4
    assert [r.body for r in bounded.requests] == [r.body for r in full.requests[: len(bounded.requests)]]


def test_a_parquet_image_column_of_hugging_faces_image_feature_is_read(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    inline = images.png(3, 0, 20, 10)
    beside = _write_png(tmp_path / "beside.png", 1)
    rows = [{"bytes": inline, "path": None}, {"bytes": None, "path": "beside.png"}, {"bytes": b"junk", "path": None}]
    pq.write_table(pa.table({"text": ["a cat", "a dog"], "image": rows[:2]}), tmp_path / "good.parquet")
    plan = plan_for(pb.InfinityEmbeddingsUser, options("--dataset", f"file:{tmp_path / 'good.parquet'}"))
    sent = [from_data_url(u) for r in plan.requests[:2] for u in orjson.loads(r.body)["input"]]
    assert sent == [inline, beside], "the struct's bytes, or its path relative to the file"

    pq.write_table(pa.table({"image": rows}), tmp_path / "bad.parquet")
    with pytest.raises(OptionError, match=r"bad\.parquet row 2: image bytes are not a readable PNG or JPEG"):
        plan_for(pb.InfinityEmbeddingsUser, options("--dataset", f"file:{tmp_path / 'bad.parquet'}"))


def test_a_dataset_stops_reading_at_its_bound_of_inline_image_bytes(tmp_path, monkeypatch):
    url = images.generated(Settings(image_size=(20, 10)), 0)
    lines = [orjson.dumps({"text": f"t{i}", "image": url}).decode() for i in range(10)]
    (tmp_path / "inline.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(images, "DATASET_IMAGE_BYTES", 3 * len(url))
    records = load_file(str(tmp_path / "inline.jsonl"), "texts")
    assert len(records) == 3, "images held inline count against the bound; files, held as paths, do not"
