"""EmbeddingsUser, with Locust's chart history taken every 0.1 s and "an hour" of it eight points: the
thinning of Locust's own history (poolbench_locust/metrics/locust_state.py) shows in a run of seconds.
Both are module constants read when used, set here before the run starts."""

from locust import stats

from poolbench_locust import EmbeddingsUser  # noqa: F401  (Locust runs the User classes it finds here)
from poolbench_locust.metrics import locust_state

stats.HISTORY_STATS_INTERVAL_SEC = 0.1
locust_state.HISTORY_KEPT_S = 0.8
