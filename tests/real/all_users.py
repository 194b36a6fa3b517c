"""Every User class, for `locust -f tests/real/all_users.py ClassName`: each test names the one it runs."""

from poolbench_locust import *  # noqa: F403  (Locust runs the User classes named on its command line)
