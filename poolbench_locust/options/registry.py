"""Every option of poolbench-locust, each declared once, here.

To add an option, add ONE `Option(...)` (a value) or `flag(...)` (an on/off switch) to the group it
belongs in below, give it its typed field in `Settings`, then use it. Its declaration says all there is
to say: the flag, its parser (which is its type and its check), its default, its --help text and its
web-form label; the dest (`--check-p95-ms` -> `check_p95_ms`) and the env var (`LOCUST_CHECK_P95_MS`)
follow from the flag, the --help group and the web-form group from the block it is in. Everything that
lists options reads this tuple: Locust's parser (options/cli.py), the web form's groups, labels, checks
and secret fields, the k8s options.env test and the tests that go through every option. `Settings`
(options/settings.py) has one field per option written out, so that a reader and a type checker see each
one's type: the field is the option's dest, typed as its parser returns (with `| None` when the default
is None), its default the parsed default; tests/test_options.py fails until the field and the declaration
agree.

How a module reads a value: `settings_of(environment).check_p95_ms`, or `Settings.from_options(options)`
for a set of options that is not an environment's (the web form's): every option parsed and every rule
between options applied, OptionError with the option's one line on a bad value, so a web-form text is
judged like the command line's. A rule between options goes in options/settings.py (`_refused`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poolbench_locust.options.parsers import (
    OptionError,
    below_one,
    cosine_floor,
    counts,
    dataset,
    extra_body,
    file_name,
    gpu_counts,
    host_url,
    image_size,
    metrics_targets,
    non_negative,
    one_of,
    port,
    positive,
    prices,
    rates,
    ratio,
    route,
    seconds,
    share,
    slo,
    span,
    whole,
)
from poolbench_locust.options.values import ANSWER_TERMS, TIME_KEYS
from poolbench_locust.wire import DTYPE_SIZES, EMBEDDING_TYPES, ENCODINGS, ENDIANNESS, IMAGE_FORMATS, POOLING_TASKS


@dataclass(frozen=True)
class Option:
    """One option. `parse` takes its text (argparse's `type=`, the env var's, the web form's) and
    raises argparse.ArgumentTypeError on a bad one; None for a flag."""

    flag: str
    parse: Callable[[str], Any] | None
    default: Any
    help: str
    secret: bool = False
    """Never shown: a secret field in the web form, and left out of every text (Settings' repr too)."""
    group: str = ""
    label: str = ""
    """Its name in the web form."""
    web_ui: bool = True
    """False for an option read once at start (a path on the master's disk): a form field would do nothing."""
    is_flag: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env_var(self) -> str:
        return "LOCUST_" + self.dest.upper()

    @property
    def choices(self) -> tuple[str, ...] | None:
        return getattr(self.parse, "choices", None)

    def value(self, text: Any) -> Any:
        """The value of a text given for this option (None: not given); OptionError if it is bad."""
        if self.is_flag:
            return text if isinstance(text, bool) else str(text).lower() == "true"
        if text is None or (text == "" and self.default is None):
            return None
        if self.parse is None:
            return text
        try:
            return self.parse(str(text))
        except argparse.ArgumentTypeError as e:
            raise OptionError(self.flag, str(e)) from None

    @property
    def default_value(self) -> Any:
        """The default, parsed: `1` of --batch-size is Span(1, 1)."""
        return self.value(self.default)


def flag(name: str, help_text: str, label: str, web_ui: bool = True) -> Option:
    """An on/off option: off unless given."""
    return Option(name, None, False, help_text, label=label, web_ui=web_ui, is_flag=True)


def group(title: str, *options: Option) -> tuple[Option, ...]:
    return tuple(dataclasses.replace(opt, group=title) for opt in options)


REQUEST = "Request"
WORKLOAD = "Workload"
OPEN_LOOP = "Open loop"
SWEEP = "Sweep"
CAPACITY = "Capacity"
CHECKS = "Checks"
AB = "A/B"
COST = "Cost"
SERVER_METRICS = "Server metrics"
PROMETHEUS = "Prometheus"
RESULTS = "Results"

ALL_OPTIONS: tuple[Option, ...] = (
    *group(
        REQUEST,
        Option("--model", str, "", "Model name sent in every request (empty: the server's default).", label="Model"),
        Option(
            "--encoding-format",
            one_of(ENCODINGS),
            "float",
            "How embeddings come back: float (JSON numbers), base64, bytes (binary body + metadata header) "
            "or bytes_only (binary body, no metadata: tokens counted by the client).",
            label="Encoding format",
        ),
        Option(
            "--embed-dtype",
            one_of(tuple(DTYPE_SIZES)),
            "float32",
            "Element type of base64/bytes embeddings.",
            label="Embedding element type",
        ),
        Option(
            "--endianness", one_of(ENDIANNESS), "native", "Byte order of base64/bytes embeddings.", label="Byte order"
        ),
        Option(
            "--dimensions",
            whole(1),
            None,
            "Ask for embeddings of this many dimensions (Matryoshka models).",
            label="Dimensions",
        ),
        Option(
            "--pooling-task",
            one_of(POOLING_TASKS),
            None,
            "The task sent to vLLM's /pooling (it must be the model's own): token_embed and token_classify answer "
            "one row per input token, each row count checked against the input's tokens (embed&token_classify is "
            "refused: vLLM answers it only through an IO processor plugin). token_embed on EmbeddingsUser: a "
            "token-embed model's /v1/embeddings. Not given: none is sent.",
            label="Pooling task",
        ),
        Option(
            "--late-chunk-size",
            whole(1),
            None,
            "vLLM token-embed models: late chunking, sent as late_chunking_params.chunk_size (tokens a chunk).",
            label="Late chunking, tokens a chunk",
        ),
        Option(
            "--embedding-type",
            one_of(EMBEDDING_TYPES),
            None,
            "A packed embedding type: Cohere-style /v2/embed embedding_types, Voyage output_dtype; Infinity: the "
            "--embedding-dtype the server was started with. binary and ubinary pack 8 dimensions a byte; every "
            "answer is checked at that size. Not given: float.",
            label="Embedding type",
        ),
        Option(
            "--truncate",
            one_of(("end", "start", "none")),
            None,
            "Ask the server to cut inputs longer than the model's limit: end or start (which side is cut), or none "
            "(refuse them), in the class's server's own field (vLLM truncate_prompt_tokens, TEI, NIM and Cohere "
            "truncate). Not given: nothing is sent, the server's default.",
            label="Truncate long inputs",
        ),
        Option(
            "--input-type",
            str,
            None,
            "The input_type sent, for servers that ask what the inputs are for (NIM: query or passage; Cohere and "
            "vLLM /v2/embed: search_document, search_query, classification, clustering; Voyage: query, document).",
            label="Input type",
        ),
        Option(
            "--extra-body",
            extra_body,
            None,
            "A JSON object of the server's own fields, merged into every request body, e.g. "
            "'{\"priority\": 1}' or '{\"use_activation\": false}' for vLLM. A field the class builds itself "
            "(input, model...) is refused unless --extra-body-overrides is given.",
            label="Extra request fields, JSON",
        ),
        flag(
            "--extra-body-overrides",
            "Let --extra-body replace fields the class builds itself (input, model, texts...).",
            "Extra fields may replace the class's own",
        ),
        Option(
            "--endpoint-path", route, None, "Override the route of the User class (e.g. /v2/rerank).", label="Route"
        ),
        Option(
            "--infer-input",
            str,
            None,
            "KServe/Triton: the name of the model's input tensor that takes the texts (default: its one BYTES "
            "input, from GET /v2/models/{model} at start).",
            label="Inference input tensor",
        ),
        Option(
            "--infer-output",
            str,
            None,
            "KServe/Triton: the name of the model's output tensor that holds the embeddings (default: its one "
            "FP32 output, from GET /v2/models/{model} at start).",
            label="Inference output tensor",
        ),
        Option(
            "--api-key",
            str,
            None,
            "Sent as 'Authorization: Bearer' ($OPENAI_API_KEY only with --api-key-from-env).",
            secret=True,
            label="API key",
        ),
        flag(
            "--api-key-from-env",
            "Send $OPENAI_API_KEY as the API key when --api-key is not given.",
            "API key from the environment",
        ),
        flag(
            "--api-key-over-http",
            "Allow sending the API key over plain http:// to a host that is not loopback.",
            "Allow the key over plain http",
        ),
        flag(
            "--tls-verify",
            "Verify the server's TLS certificate and name (default: not verified, as Locust's FastHttpUser).",
            "Verify TLS certificates",
        ),
        Option(
            "--ca-bundle",
            str,
            None,
            "PEM file of the CAs to verify the server's certificate with (implies --tls-verify).",
            label="CA bundle file",
        ),
        Option(
            "--request-timeout",
            seconds,
            60.0,
            "Whole-request deadline in seconds, headers and body together.",
            label="Request timeout, s",
        ),
        Option(
            "--max-body-mb",
            whole(1),
            256,
            "Largest JSON answer kept in memory, in MB after inflating gzip/deflate; a larger one fails. "
            "Binary bodies are streamed, never kept.",
            label="Largest JSON answer kept, MB",
        ),
        Option(
            "--max-header-kb",
            whole(1),
            64,
            "Largest response head (status line and headers), in KiB. A `bytes` answer's head may be larger "
            "by the largest metadata header a valid answer to its batch can have.",
            label="Largest response head, KiB",
        ),
        flag(
            "--no-validate", "Do not check the answers (counts of embeddings, byte sizes).", "Do not check the answers"
        ),
        flag(
            "--check-vectors",
            "Check that the first vector of every answer is finite and not all zero.",
            "Check the vectors",
        ),
        flag(
            "--require-server-tokens",
            "Fail an answer that carries no token count of the server's; by default its tokens are the client's "
            "own count, labelled as such, with one warning per route.",
            "Require the server's token count",
        ),
        flag(
            "--no-preflight",
            "Do not send one request per User class before the test (a 4xx stops the run).",
            "Skip the preflight request",
        ),
        Option(
            "--consistency-inputs",
            whole(0),
            8,
            "Reference inputs whose answers under load are compared with their answer alone, before the users "
            "start (docs/consistency.md): the first text of each of the first N distinct requests (rerank, "
            "score: the whole request). 0: none.",
            label="Consistency reference inputs",
        ),
        flag(
            "--no-consistency",
            "Do not compare answers under load with reference answers taken before the users start.",
            "Skip the answer consistency check",
        ),
        Option(
            "--consistency-rate",
            share,
            0.01,
            "The largest share (0-1] of the requests sent whose answers are compared with their reference (one "
            "input each); at least "
            "one comparison a second is made whatever the share (docs/consistency.md).",
            label="Share of requests compared",
        ),
        Option(
            "--consistency-reference",
            file_name,
            None,
            "Compare the answers with the reference answers in this JSON Lines file (one written by "
            "--consistency-save, or by the model run elsewhere) instead of the server's answers alone.",
            label="Reference answers file",
        ),
        Option(
            "--consistency-save",
            file_name,
            None,
            "Write the reference answers taken at the start to this JSON Lines file (for --consistency-reference).",
            label="Save the reference answers to",
        ),
        # The bundled mock is started once, at launch, when no --host is given (embedded_mock.py): its faults
        # let a user see the consistency check find drift without starting a server.
        Option(
            "--mock-drift-above",
            whole(0),
            None,
            "The bundled mock (no --host): while more than N requests are in flight, answer drifted vectors "
            "(cosine 0.909 with the right ones), for the consistency check to find (docs/mock-server.md).",
            label="Bundled mock: drift above N in flight",
            web_ui=False,
        ),
        flag(
            "--mock-cache-drift",
            "The bundled mock (no --host): answer an input it answered before with a drifted vector.",
            "Bundled mock: drift on a repeated input",
            web_ui=False,
        ),
        Option(
            "--mock-flip-above",
            whole(0),
            None,
            "The bundled mock (no --host): while more than N requests are in flight, swap a ranking's two best scores.",
            label="Bundled mock: flip rankings above N in flight",
            web_ui=False,
        ),
    ),
    *group(
        WORKLOAD,
        Option(
            "--batch-size",
            span(1),
            1,
            "Inputs per request (EmbeddingsChatUser: conversations): N, or LOW:HIGH drawn per request.",
            label="Inputs per request",
        ),
        Option(
            "--input-len",
            span(1),
            128,
            "Length of each random input: tokens with --tokenizer, else words. N, or LOW:HIGH drawn per input.",
            label="Input length",
        ),
        Option(
            "--input-len-range",
            span(1),
            None,
            "LOW:HIGH: draw each random input's length uniformly (overrides N).",
            label="Input length range",
        ),
        Option(
            "--images",
            whole(0),
            0,
            "Images per input (for rerank and score: per document, beside its text), generated from --seed, all "
            "distinct (see --image-pool), sent as data URLs in the form the class's server takes (Infinity: the "
            "images alone).",
            label="Images per input",
        ),
        Option(
            "--image-size", image_size, "512x512", "Generated images' size, WIDTHxHEIGHT pixels.", label="Image size"
        ),
        Option("--image-format", one_of(IMAGE_FORMATS), "png", "Generated images' format.", label="Image format"),
        Option(
            "--image-pool",
            whole(0),
            0,
            "0: every generated image sent is new, across users, processes and workers. N: the run sends N "
            "distinct images, over and over (a study of the server's image cache).",
            label="Distinct images, 0 for every one new",
        ),
        Option(
            "--documents",
            span(1),
            8,
            "Documents per query for rerank and score: N, or LOW:HIGH.",
            label="Documents per query",
        ),
        Option(
            "--dataset",
            dataset,
            "random",
            "random; file:PATH of .txt (a line an input), .jsonl (text; query+documents; messages), .csv, "
            ".parquet or a datasets save_to_disk directory; hf:NAME[:SPLIT] from the local Hugging Face cache; "
            "or trace:FILE.jsonl, timestamped requests replayed at their times (docs/traces.md).",
            label="Dataset",
        ),
        Option(
            "--dataset-column",
            str,
            None,
            "Column of a Parquet file or Hugging Face dataset that holds the texts (default: text; "
            "rerank/score read query and documents).",
            label="Text column of the dataset",
        ),
        Option(
            "--seed",
            whole(0),
            0,
            "Seed of the random inputs and batch shapes: the same seed sends the same requests.",
            label="Seed",
        ),
        Option(
            "--repeat-ratio",
            below_one,
            0.0,
            "Share of the inputs (0 <= R < 1) that are exact copies of inputs an earlier request of the same User "
            "class's pool carries, to provoke the server's caches; batch sizes kept. 0: off.",
            label="Repeated inputs share",
        ),
        Option(
            "--shared-prefix-tokens",
            whole(0),
            0,
            "Every input (for rerank and score: every query) begins with the same N tokens, part of --input-len "
            "(a dataset's texts get them prepended). 0: off.",
            label="Shared prefix, tokens",
        ),
        Option(
            "--tokenizer",
            str,
            None,
            "Path of a local tokenizer.json: exact client-side token counts and lengths.",
            label="Tokenizer file",
        ),
        flag(
            "--count-tokens-with-server",
            "Count client-side tokens with the server's /tokenize route, before the test.",
            "Count tokens with the server",
        ),
        Option(
            "--warmup",
            non_negative,
            0.0,
            "Seconds from the start whose requests are sent but counted nowhere.",
            label="Warm-up, s",
        ),
        Option(
            "--repeat",
            whole(1),
            1,
            "Cut the measured window (-t after --warmup) into N consecutive repeats, stats reset between; "
            "each headline figure a mean and its 95-percent interval, widened when consecutive repeats are "
            "correlated (lag-1 autocorrelation), none below 5 repeats or when too correlated; with "
            "--find-capacity, the whole search N times.",
            label="Repeats",
        ),
        Option(
            "--max-requests",
            whole(1),
            None,
            "End the run once N requests have ended, succeeded or failed (Locust's Request Count, counted after "
            "--warmup); -t still ends it if sooner. The requests in flight then finish and count too: one process "
            "ends with at least N, at most N plus those in flight when the Nth ended (fewer than the users); a "
            "distributed run counts its workers' reports, sent every 3 s, so it may end up to one report's requests "
            "past N. Headless, the run quits as at -t; in the web UI, the test stops.",
            label="End after this many requests",
        ),
    ),
    *group(
        OPEN_LOOP,
        Option(
            "--request-rate",
            positive,
            None,
            "Open loop: requests/s of the whole run (all workers together).",
            label="Request rate, requests/s",
        ),
        Option(
            "--burstiness",
            positive,
            1.0,
            "Gamma shape of the arrivals: 1 is Poisson, < 1 burstier, > 1 steadier.",
            label="Burstiness",
        ),
        Option(
            "--max-concurrency",
            whole(1),
            None,
            "Open loop: requests in flight at most (the whole run).",
            label="Most requests in flight",
        ),
        Option(
            "--trace-speed",
            positive,
            1.0,
            "Replay a trace (--dataset trace:) this many times faster: 2 sends it in half its time.",
            label="Trace speed",
        ),
    ),
    *group(
        SWEEP,
        Option(
            "--sweep-rates",
            rates,
            None,
            "Sweep: open-loop request rates, one step each (e.g. 10,20,40).",
            label="Request rates of the steps",
        ),
        Option(
            "--sweep-users",
            counts,
            None,
            "Sweep: concurrency levels (users), one step each (e.g. 8,16,32).",
            label="Users of the steps",
        ),
        Option("--sweep-step-time", positive, 30.0, "Seconds per sweep step.", label="Seconds per step"),
    ),
    *group(
        CAPACITY,
        # In the web form too: each run's form installs the search (its load shape) or removes it
        # (capacity/capacity_tab.py), and the Capacity tab shows its probes.
        flag(
            "--find-capacity",
            "Search the highest open-loop request rate that meets --slo: doubling from --capacity-start-rate, "
            "then bisection; each probe runs --sweep-step-time seconds after a settle period; the run ends by itself.",
            "Find the capacity",
        ),
        Option(
            "--capacity-attainment",
            share,
            0.99,
            "--find-capacity: the share (0-1] of a probe's requests that must meet every objective of --slo.",
            label="Share of requests within the SLO",
        ),
        Option(
            "--capacity-precision",
            share,
            0.05,
            "--find-capacity: bisect until the highest passing and the lowest failing rate are this share "
            "(0-1] of the passing one apart.",
            label="Precision of the capacity",
        ),
        Option(
            "--capacity-start-rate",
            positive,
            1.0,
            "--find-capacity: the first probe's request rate, requests/s (all workers together).",
            label="First probe's rate, requests/s",
        ),
    ),
    *group(
        CHECKS,
        Option(
            "--check-p95-ms",
            non_negative,
            None,
            "Fail the run if Locust's total p95 response time exceeds this.",
            label="Highest p95 response time, ms",
        ),
        Option(
            "--check-fail-ratio",
            ratio,
            None,
            "Fail the run if the ratio of failed requests exceeds this (0-1).",
            label="Highest failure ratio",
        ),
        Option(
            "--check-min-tokens-per-s",
            non_negative,
            None,
            "Fail the run if input tokens/s stay below this.",
            label="Lowest input tokens/s",
        ),
        Option(
            "--slo",
            slo,
            None,
            f"Service-level objectives for goodput, KEY=MS pairs ({', '.join(TIME_KEYS)}), e.g. "
            f"e2e_ms=300,ttfb_ms=100; and for --find-capacity's probes, the answers' {ANSWER_TERMS} "
            "(docs/consistency.md).",
            label="Service-level objectives, ms",
        ),
        Option(
            "--check-min-goodput",
            non_negative,
            None,
            "Fail the run if goodput (requests/s that met every objective of --slo) stays below this.",
            label="Lowest goodput, requests/s",
        ),
        Option(
            "--check-min-cosine",
            cosine_floor,
            None,
            "Fail the run if an answer compared with its reference (docs/consistency.md) has a cosine below this, "
            "a number in (-1, 1].",
            label="Lowest cosine of an answer to its reference",
        ),
        Option(
            "--check-max-top1-changed",
            ratio,
            None,
            "Fail the run if the share (0-1) of compared rerank or score answers whose best document changed "
            "exceeds this.",
            label="Highest share of answers whose best document changed",
        ),
        Option(
            "--check-min-rate-ratio",
            share,
            None,
            "Open loop: fail the run if the requests sent are fewer than this share (0-1) of those the "
            "schedule made due (the client fell behind its --request-rate, sweep step or trace).",
            label="Lowest share of the open loop's requests sent",
        ),
    ),
    *group(
        AB,
        Option(
            "--ab-host",
            host_url,
            None,
            "A second server, B, measured beside --host (A) on one schedule: each scheduled request goes to A or "
            "B in turn (per user, so both see the same load shape), each host's figures under its request names "
            "marked [A] and [B], and a comparison of B against A, each figure's difference with an interval and "
            "a verdict (docs/choosing-servers.md). With --find-capacity: each host's own capacity, their probes "
            "interleaved.",
            label="Second server B, URL",
        ),
        flag(
            "--ab-paired",
            "With --ab-host: send each scheduled request's input to both hosts at the same moment (two requests "
            "launched together), and compare them pair by pair.",
            "Send each input to both servers at once",
        ),
    ),
    *group(
        COST,
        Option(
            "--gpu-hour-cost",
            prices,
            None,
            "Price of one GPU-hour in USD: the run's cost per 1M input tokens and per 1,000 requests at the "
            "measured throughput (and at the capacity found by --find-capacity). With --ab-host, one price per "
            "host, A,B (e.g. 2.5,1.2); one price applies to both.",
            label="GPU-hour price, USD, or A,B with a second server",
        ),
        Option(
            "--gpus",
            gpu_counts,
            1,
            "GPUs the server runs on (--gpu-hour-cost prices each). With --ab-host, one count per host, A,B; "
            "one count applies to both.",
            label="GPUs, or A,B with a second server",
        ),
    ),
    *group(
        SERVER_METRICS,
        Option(
            "--server-metrics",
            metrics_targets,
            "auto",
            "Scrape the server's Prometheus metrics during the run: auto (the host's /metrics, when it answers; "
            "with --ab-host, each host's), off, or URLs separated by commas. With --ab-host each URL is the host's "
            "whose server it is on, or says whose it is: A=URL, B=URL (docs/server-metrics.md).",
            label="Server metrics URL",
        ),
        Option(
            "--server-metrics-interval",
            positive,
            5.0,
            "Seconds between two scrapes of the server's metrics.",
            label="Seconds between scrapes",
        ),
    ),
    *group(
        PROMETHEUS,
        # Read once, when Locust starts (exporter/prometheus_endpoint.py binds the port then): the form shows them
        # with "set at launch", and a run started with another port is told the endpoint stays put.
        Option(
            "--prometheus-port",
            port,
            None,
            "Serve the client's own figures for Prometheus at :PORT/metrics.",
            label="Prometheus port, set at launch",
        ),
        Option(
            "--prometheus-host",
            str,
            "",
            "Interface the Prometheus endpoint binds (empty or *: all, like Locust's --web-host).",
            label="Prometheus interface, set at launch",
        ),
        Option(
            "--prometheus-linger",
            non_negative,
            0.0,
            "Seconds the Prometheus endpoint stays up after the run's final figures, for a last scrape.",
            label="Seconds up after the run, set at launch",
        ),
    ),
    *group(
        RESULTS,
        Option(
            "--json-result",
            file_name,
            None,
            "Write the run's figures to this JSON file at exit (its schema: poolbench_locust.results.schema.whole()).",
            label="JSON result file",
            web_ui=False,
        ),
        Option(
            "--console-width",
            whole(0),
            120,
            "The widest line of the console's own tables: a wider table is split into tables that each repeat "
            "its first column, columns empty in every row are left out, long names are cut in the middle. "
            "0: every table whole, on one line a row (the CSV files always hold every column).",
            label="Console width",
            web_ui=False,
        ),
    ),
)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(opt.group for opt in ALL_OPTIONS))
"""The groups in display order: --help's and the web form's."""
BY_FLAG: dict[str, Option] = {opt.flag: opt for opt in ALL_OPTIONS}
