"""The cli_filter's resident decider (msched.plugin.resident), without Slurm.

- Parity: over many models and options, the decider's answer is msub's own decision (the comment and
  constraint msub would add), asked by a client process with the environment a sbatch would have.
- Through the real cli_filter.lua (Lua 5.1 + LuaSocket) as an ordinary user: the first submission's
  one-shot decision stays on as the user's decider, later ones are answered by it with the same
  answer; a decider that stops answering lets the job in unchanged with one line within the timeout;
  a reinstalled filter (another generation) is never answered by the old decider, which exits.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import run_as, user_env, wait_for

from msched.config import Config
from msched.plugin import resident
from msched.plugin.generate import CLI_FILTER, install

LUA = shutil.which("lua5.1")
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")


def _lua_has_socket() -> bool:
    if LUA is None:
        return False
    return subprocess.run([LUA, "-e", 'require("socket.unix")'], capture_output=True).returncode == 0


def _site(tmp: Path) -> dict[str, str]:
    """A site config with free times a round just published (a100 busy for two hours, titanv for one),
    so the decision is not the idle cluster's, and no Slurm (SLURM_CONF unset: no sinfo, no squeue)."""
    now = time.time()
    state = tmp / "state"
    state.mkdir(exist_ok=True)
    free = {"a100": now + 7200, "titanv": now + 3600, "rtx2080ti": now, "titanxp": now}
    (state / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": free}))
    (tmp / "msched.toml").write_text(f'state_dir = "{state}"\n')
    os.chmod(state, 0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "MSCHED_"))}
    return {**env, "MSCHED_CONFIG": str(tmp / "msched.toml"), "XDG_CACHE_HOME": str(tmp / "xdg")}


def _cases(tmp: Path, n: int = 60) -> list[dict]:
    """(msub argv, Slurm's option JSON for the same request) pairs, drawn with a fixed seed."""
    rng = random.Random(20)
    models = ["resnet50", "vgg16", "densenet121", "mobilenet_v2", "efficientnet_b0", "alexnet", "squeezenet1_0",
              "wide_resnet50_2", "resnext50_32x4d", "inception_v3", "my_transformer", None]
    cases = []
    for i in range(n):
        model = rng.choice(models)
        lines = ["#!/bin/sh"]
        if model:
            lines.append(f"#MSCHED --model={model}")
        iters = rng.choice([None, 300, 20000])
        if iters:
            lines.append(f"#MSCHED --iterations={iters}")
        lines.append("python train.py")
        script = tmp / f"job{i}.sh"
        script.write_text("\n".join(lines) + "\n")
        argv, options = [], {"argv": [str(script)]}
        gpus = rng.choice([None, 1, 2, 4])
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
            options["gres"] = f"gres:gpu:{gpus}"
        for name, values in (("time", [None, "5", "60", "1-00:00:00"]), ("constraint", [None, "ib", "a100"]),
                             ("comment", [None, "my run"])):
            value = rng.choice(values)
            if value:
                argv.append(f"--{name}={value}")
                options[name] = value
        cases.append({"argv": [*argv, str(script)], "options": options})
    plain = tmp / "plain.sh"
    plain.write_text("#!/bin/sh\n./simulate --steps 100\n")
    cases.append({"argv": [str(plain)], "options": {"argv": [str(plain)]}})             # msched has nothing to say
    cases.append({"argv": ["--gres=gpu:1", str(plain)], "options": {"gres": "gres:gpu:1", "argv": [str(plain)]}})
    return cases


# Runs in a process with the site's environment (a sbatch's, as the decider reads it from /proc):
# msub's decision in-process, the decider's over its socket, for every case.
CLIENT = r"""
import json, socket, sys
from urllib.parse import unquote
from msched.msub.main import build_submission

path, generation = sys.argv[1], sys.argv[2]
out = []
for case in json.load(sys.stdin):
    sub, _ = build_submission(case["argv"])
    msub = {w[2:].split("=", 1)[0]: w.split("=", 1)[1] for w in sub.added}
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    s.sendall(f"msched-filter-request 1 sbatch {generation} 20\n".encode() + json.dumps(case["options"]).encode())
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    lines = answer.decode().splitlines()
    assert lines[0] == "msched-filter 1" and lines[-1] == "end", lines
    decider = {k: unquote(v) for k, _, v in (ln.partition(" ") for ln in lines[1:-1]) if k != "warning"}
    out.append({"msub": msub, "decider": decider})
print(json.dumps(out))
"""


def _start_decider(tmp_path, idle_s: float, stderr):  # noqa: ANN001, ANN202
    """A decider serving a private socket in a 0700 cache directory, started as `serve` runs it (generation
    gen1, 20 s per decision, exiting after `idle_s` idle): (socket path, its environment, the process)."""
    env = _site(tmp_path)
    sock_dir = tmp_path / "cache"
    sock_dir.mkdir(mode=0o700)
    path = str(sock_dir / "filter-test.sock")
    code = ("import os, sys; from msched.plugin.resident import serve; "
            "fd = os.open(sys.argv[1] + '.lock', os.O_RDWR | os.O_CREAT, 0o600); "
            f"sys.exit(serve(sys.argv[1], 'gen1', 20.0, fd, {idle_s!r}))")
    proc = subprocess.Popen([sys.executable, "-I", "-c", code, path], env=env, stdout=subprocess.DEVNULL,
                            stderr=stderr)
    return path, env, proc


@pytest.fixture
def decider(tmp_path):
    """A decider serving a private socket, started as `serve` runs it (root is refused only by `claim`,
    the one-shot path's gate, so this test can run where CI runs: as root)."""
    path, env, proc = _start_decider(tmp_path, idle_s=120, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: os.path.exists(path), timeout=60)
        yield path, env, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_decider_decides_as_msub_over_many_models_and_options(decider, tmp_path):
    path, env, _proc = decider
    cases = _cases(tmp_path)
    out = subprocess.run([sys.executable, "-I", "-c", CLIENT, path, "gen1"], input=json.dumps(cases), env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    assert len(results) == len(cases)
    for case, got in zip(cases, results, strict=True):
        assert got["decider"] == got["msub"], case
    # the draw covers what matters: tagged with types, untagged records, a pinned type, plain jobs
    comments = [r["msub"].get("comment", "") for r in results]
    assert sum("added=" in c for c in comments) >= 10
    assert any("why=unknown%20model" in c for c in comments)
    assert any("why=GPU%20type%20a100%20chosen" in c for c in comments)
    assert any(r["msub"] == {} for r in results)
    assert any("why=no%20model%20named" in c for c in comments)
    assert sum("constraint" in r["msub"] for r in results) >= 10


def test_the_decider_answers_only_its_own_generation_and_then_exits(decider):
    path, env, proc = decider
    code = ("import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            "s.sendall(b'msched-filter-request 1 sbatch gen0 2\\n{}'); s.shutdown(socket.SHUT_WR); "
            "sys.stdout.write(s.recv(100).decode())")
    out = subprocess.run([sys.executable, "-I", "-c", code, path], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout == resident.STALE
    assert proc.wait(timeout=30) == 0                     # it made way for the filter's own generation
    assert not os.path.exists(path)


# ------------------------------------------------------------------ through cli_filter.lua, as a user
DRIVER = """
slurm = { SUCCESS = 0, ERROR = -1, log_info = function() end }
slurm.json_cli_options = function(o)
    return '{"comment":"keep me","gres":"gres:gpu:1","wrap":"python t.py --arch resnet50"}'
end
dofile(arg[1])
local options = { type = "sbatch", comment = "keep me", wrap = "python t.py --arch resnet50", gres = "gres:gpu:1" }
local t0 = os.time()
slurm_cli_pre_submit(options, 0)
io.stderr:write("elapsed ", os.time() - t0, "\\n")
io.stderr:write("comment ", tostring(options.comment), " constraint ", tostring(options.constraint), "\\n")
"""


@pytest.fixture
def user_site(ordinary_user):
    """A plugin directory, a site config and a private cache directory the ordinary user can use."""
    if not _lua_has_socket():
        pytest.skip("lua5.1 with LuaSocket is not installed (apt-get install lua5.1 lua-socket)")
    top = Path(tempfile.mkdtemp(prefix="msched-resident-"))
    try:
        os.chmod(top, 0o755)
        env = _site(top)
        os.chmod(top / "msched.toml", 0o644)
        os.chmod(top / "state" / "gpu_free_time.json", 0o644)
        cache = top / "cache"
        cache.mkdir(mode=0o700)
        os.chown(cache, ordinary_user.uid, ordinary_user.gid)
        (top / "driver.lua").write_text(DRIVER)
        os.chmod(top / "driver.lua", 0o644)
        user = {"MSCHED_CONFIG": env["MSCHED_CONFIG"], "MSCHED_CACHE_DIR": str(cache)}
        yield top, user, resident.socket_path(user)
    finally:
        resident.stop(resident.socket_path({"MSCHED_CACHE_DIR": str(top / "cache")}))
        shutil.rmtree(top, ignore_errors=True)


def _submit(ordinary_user, top: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    proc = run_as(ordinary_user.name, [LUA, str(top / "driver.lua"), str(top / CLI_FILTER)], env, cwd=top,
                  timeout=60)
    status = next((ln for ln in proc.stderr.splitlines() if ln.startswith("comment ")), "")
    return proc, status


def _decider_pid(path: str) -> int | None:
    try:
        pid = int(Path(path + ".lock").read_text().strip())
        return pid if b"msched" in Path(f"/proc/{pid}/cmdline").read_bytes() else None
    except (OSError, ValueError):
        return None


def test_the_first_submission_leaves_a_decider_that_answers_the_next_alike(ordinary_user, user_site):
    top, env, path = user_site
    install(str(top), Config(), timeout_s=20)
    os.chmod(top / CLI_FILTER, 0o644)
    first, status = _submit(ordinary_user, top, env)
    assert first.returncode == 0 and first.stdout == "", first.stderr
    assert "comment msched:v1;model=resnet50;" in status and "added=" in status and "keep me constraint " in status
    pid = wait_for(lambda: _decider_pid(path) if os.path.exists(path) else None, timeout=60)
    assert os.stat(path).st_uid == ordinary_user.uid and os.stat(path).st_mode & 0o077 == 0
    again, status2 = _submit(ordinary_user, top, env)
    assert again.returncode == 0 and again.stdout == "" and "warning" not in again.stderr
    assert status2 == status                                   # the same decision, through the decider
    assert _decider_pid(path) == pid                           # answered by it: no second decider
    # a reinstalled filter is another generation: the old decider answers it "stale" and exits, the
    # one-shot path decides, and its process stays on as the new decider
    install(str(top), Config(), timeout_s=2)
    os.chmod(top / CLI_FILTER, 0o644)
    stale, status3 = _submit(ordinary_user, top, env)
    assert stale.returncode == 0 and status3 == status and "warning" not in stale.stderr
    new = wait_for(lambda: _decider_pid(path) not in (None, pid) and os.path.exists(path) and _decider_pid(path),
                   timeout=60)
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    # a decider that stops answering (its whole group: the spare waiting on the socket too): the job
    # goes in unchanged, one line, within the filter's timeout
    os.killpg(new, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        hung, status4 = _submit(ordinary_user, top, env)
        elapsed = time.monotonic() - t0
    finally:
        os.killpg(new, signal.SIGCONT)
    assert hung.returncode == 0 and hung.stdout == ""
    warnings = [ln for ln in hung.stderr.splitlines() if ln.startswith("msched: warning:")]
    assert len(warnings) == 1 and "submitted without msched's tag" in warnings[0], hung.stderr
    assert status4.startswith("comment msched:v1;why=") and status4.endswith("keep me constraint nil")
    assert elapsed < 10, elapsed


# 16 submissions at once, from one process with the site's environment: every answer is msub's
BURST_CLIENT = r"""
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
from msched.msub.main import build_submission

path, generation = sys.argv[1], sys.argv[2]
case = json.load(sys.stdin)

def ask(_):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(path)
    s.sendall(f"msched-filter-request 1 sbatch {generation} 20\n".encode() + json.dumps(case["options"]).encode())
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    return answer.decode()

with ThreadPoolExecutor(16) as pool:
    answers = list(pool.map(ask, range(16)))
sub, _ = build_submission(case["argv"])
print(json.dumps({"answers": answers, "msub": list(sub.added)}))
"""


def test_a_burst_of_parallel_submissions_is_answered_alike(decider, tmp_path):
    path, env, proc = decider
    script = tmp_path / "burst.sh"
    script.write_text("#!/bin/sh\n#MSCHED --model=densenet121\npython train.py\n")
    case = {"argv": ["--gres=gpu:1", "--time=60", str(script)],
            "options": {"gres": "gres:gpu:1", "time": "60", "argv": [str(script)]}}
    out = subprocess.run([sys.executable, "-I", "-c", BURST_CLIENT, path, "gen1"], input=json.dumps(case), env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert len(got["answers"]) == 16 and len(set(got["answers"])) == 1         # every one answered, alike
    from urllib.parse import unquote
    lines = got["answers"][0].splitlines()
    assert lines[0] == "msched-filter 1" and lines[-1] == "end"
    decider_says = sorted(f"--{k}={unquote(v)}" for k, _, v in (ln.partition(" ") for ln in lines[1:-1]))
    assert decider_says == sorted(got["msub"]) and any("added=" in w for w in decider_says)
    assert proc.poll() is None                                                   # still serving


def test_an_idle_decider_exits_and_removes_its_socket(tmp_path):
    path, _env, proc = _start_decider(tmp_path, idle_s=1.0, stderr=subprocess.DEVNULL)
    try:
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not os.path.exists(path)
    # and its spare, which only waited on the socket, went with it
    wait_for(lambda: not _processes_naming(path), timeout=10)


def _processes_naming(text: str) -> list[str]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass                                  # gone meanwhile
    return found


def test_the_filter_looks_for_the_decider_where_it_listens(ordinary_user, user_site):
    """cli_filter.lua repeats msched.config.user_cache_dir's rule in Lua: both name the same socket."""
    top, _env, _path = user_site
    install(str(top), Config())
    os.chmod(top / CLI_FILTER, 0o644)
    probe = top / "probe.lua"
    probe.write_text('slurm = { SUCCESS = 0 }\ndofile(arg[1])\nio.write(tostring(msched_resident_socket()))\n')
    os.chmod(probe, 0o644)
    home = str(ordinary_user.home)
    for env in ({"HOME": home}, {"HOME": home, "XDG_CACHE_HOME": "/tmp/xdg-elsewhere"},
                {"HOME": home, "XDG_CACHE_HOME": "/tmp/xdg", "MSCHED_CACHE_DIR": "/tmp/mine"},
                {"HOME": home, "XDG_CACHE_HOME": "", "MSCHED_CACHE_DIR": ""}):
        proc = run_as(ordinary_user.name, [LUA, str(probe), str(top / CLI_FILTER)], env, cwd=top)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == resident.socket_path(user_env(ordinary_user.name, env)), env
    # root never asks a decider (its submissions take the one-shot path)
    proc = subprocess.run([LUA, str(probe), str(top / CLI_FILTER)], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "nil"
