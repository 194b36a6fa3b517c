"""--ab-host in a distributed run: each worker ships the requests it kept (by second, or by pair) to the master,
which compares B against A on every process's requests; a worker's report is checked as untrusted input, and
one that fails a check is refused whole."""

from __future__ import annotations

import pytest

from poolbench_locust.ab import ab_workers
from poolbench_locust.ab.samples import MAX_KEPT, Samples
from tests.support.locust_run import LOAD, run_locust


def _worker_samples(paired: bool = False) -> Samples:
    samples = Samples(paired)
    for i in range(40):
        side = "AB"[i % 2]
        context = {"ttfb_ms": 5.0, "input_tokens": 6} | ({"ab_pair": i // 2} if paired else {})
        samples.add(side, i == 7, 10.0 + i, context, 1_000.0 + i / 10)
    return samples


def test_a_workers_report_merges_into_the_masters_samples_whole():
    master = Samples()
    sent = _worker_samples()
    wire = ab_workers.to_wire(sent)
    assert ab_workers.to_wire(sent) is None  # taken: the next report holds only what came after
    assert ab_workers.merge(master, "w1", wire)
    assert ab_workers.merge(master, "w2", ab_workers.to_wire(_worker_samples()))
    blocks = master.blocks()
    assert sum(b.a.requests + b.b.requests for b in blocks) == 80
    assert sum(b.a.failures + b.b.failures for b in blocks) == 2
    assert sum(len(b.a.e2e) + len(b.b.e2e) for b in blocks) == 78
    assert master.span() == pytest.approx(3.9)
    paired = Samples(paired=True)
    assert ab_workers.merge(paired, "w1", ab_workers.to_wire(_worker_samples(paired=True)))
    assert len(paired.blocks()) == 20


def _wire() -> dict:
    wire = ab_workers.to_wire(_worker_samples())
    assert wire is not None
    return wire


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda w: w.update(paired=True), "another mode"),
        (lambda w: w.pop("first"), "mapping of"),
        (lambda w: w["seconds"][0][1].__setitem__(1, 10**6), "more failures"),
        (lambda w: w["seconds"][0][1].__setitem__(0, -1), "not a count"),
        (lambda w: w["seconds"][0][1].__setitem__(0, True), "not a count"),
        (lambda w: w["seconds"][0][1][3].append(12.0), "at most"),
        (lambda w: w["seconds"][0][1][3].__setitem__(0, float("nan")), "not a number"),
        (lambda w: w["seconds"][0][1][3].__setitem__(0, 1e9), "not a number"),
        (lambda w: w["seconds"][0].__setitem__(0, 5), "outside the report's starts"),
        (lambda w: w.update(seconds=w["seconds"] * 2_000), "seconds"),
        (lambda w: w["seconds"][0][2].__setitem__(3, [1.0] * (MAX_KEPT * 5)), "at most"),
        (lambda w: w.update(last=w["first"] - 1), "the last start"),
    ],
    ids=[
        *("paired", "keys", "failures", "negative", "bool", "more times than successes", "nan", "over an hour"),
        *("second outside", "too many seconds", "too many times", "last before first"),
    ],
)
def test_a_spoiled_report_is_refused_whole(spoil, says, caplog):
    wire = _wire()
    spoil(wire)
    master = Samples()
    with pytest.raises(ValueError, match=says):
        ab_workers.from_wire(wire, paired=False)
    assert not ab_workers.merge(master, "w1", wire)
    assert master.blocks() == [] and "A/B: worker w1's report refused" in caplog.text


@pytest.mark.timing
def test_the_master_compares_every_workers_requests(mock_server_factory, tmp_path):
    """Two worker processes, B 15 ms slower to its headers: the master's comparison finds it, and counts every
    request each host's names counted in Locust's own table (the workers' sum)."""
    a, b = mock_server_factory("--ttfb-ms", "10"), mock_server_factory("--ttfb-ms", "25")
    result = run_locust(
        "locustfiles/embeddings.py",
        *(*LOAD, "--ab-host", b.url, "--processes", "2"),
        host=a.url,
        users=4,
        run_time="14s",
        csv=tmp_path / "r",
        json_result=tmp_path / "r.json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = result.json()
    assert doc["run"]["runner"] == "master" and doc["run"]["workers"] == 2
    ab = doc["ab"]
    assert ab is not None and ab["mode"] == "alternate" and ab["blocks"] >= 10, ab
    stats = result.csv()
    for side in "AB":
        assert ab["requests"][side] == int(stats[f"/v1/embeddings [{side}]"]["Request Count"]) > 0
    p50 = next(f for f in ab["figures"] if f["figure"] == "p50 E2E")
    assert p50["beyond_noise"] is True and p50["difference"] > 40, p50
    assert (tmp_path / "r_ab.csv").exists()
    assert "A/B: B http://127.0.0.1" in result.stdout + result.stderr
