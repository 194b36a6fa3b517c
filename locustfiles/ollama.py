"""Ollama's native /api/embed. Run: locust -f locustfiles/ollama.py --host http://ollama:11434 --model all-minilm"""

from poolbench_locust import OllamaEmbedUser  # noqa: F401
