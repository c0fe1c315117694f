"""judge_cache (issue #12): the judge's compile caches persist in KERNELD_JUDGE_CACHE_DIR;
runners never get it."""
import os

from harness import judge_cache, spawn


def test_the_judge_points_its_caches_into_the_judge_cache(tmp_path):
    env = {judge_cache.ENV: str(tmp_path / "jc")}
    assert judge_cache.apply(env) == str(tmp_path / "jc")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "jc" / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "jc" / "triton")
    assert (tmp_path / "jc" / "inductor").is_dir()
    assert oct((tmp_path / "jc").stat().st_mode & 0o777) == "0o700"


def test_unset_or_unusable_changes_nothing(tmp_path):
    env = {}
    assert judge_cache.apply(env) is None and env == {}
    env = {judge_cache.ENV: "relative/dir"}
    assert judge_cache.apply(env) is None and "TRITON_CACHE_DIR" not in env
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = {judge_cache.ENV: str(blocker / "sub")}
    assert judge_cache.apply(env) is None and "TRITON_CACHE_DIR" not in env


def test_runners_never_see_the_judge_cache(tmp_path, monkeypatch):
    jc = str(tmp_path / "jc")
    monkeypatch.setenv(judge_cache.ENV, jc)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.path.join(jc, "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", os.path.join(jc, "triton"))
    scratch = str(tmp_path / "scratch")
    env = spawn.runner_env(scratch)
    assert judge_cache.ENV not in env
    assert not any(jc in v for v in env.values()), env
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(scratch)
    assert env["TRITON_CACHE_DIR"].startswith(scratch)
