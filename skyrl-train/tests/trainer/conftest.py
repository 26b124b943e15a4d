"""Shared fixtures for the Ray trainer tests: a tiny model folder and a small dataset (Ray: tests/conftest.py)."""

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.example_run import cpu_stack_overrides, output_overrides
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("data")
    write_dataset(path, "arithmetic", train_size=64, test_size=8, difficulty=1, seed=3)
    return path


def tiny_overrides(model_dir: str, data_dir: Path, out_dir: Path, colocate: bool = True) -> list[str]:
    """2 policy ranks and 2 (colocated) or 1 (separate) hf engines, fp32, 4 prompts x 4 samples per step."""
    train, test = data_dir / "train.parquet", data_dir / "test.parquet"
    return [
        *cpu_stack_overrides(model_dir, train, test, ranks=2, num_engines=2 if colocate else 1, colocate=colocate),
        "data.max_prompt_length=64",
        "environment.env_class=arithmetic",
        "trainer.placement.ref_num_gpus_per_node=2",
        "trainer.placement.critic_num_gpus_per_node=2",
        f"generator.inference_engine.weight_sync_backend={'shm' if colocate else 'broadcast'}",
        "trainer.ref.fsdp.mixed_precision.param_dtype=float32",
        "trainer.critic.fsdp.mixed_precision.param_dtype=float32",
        "trainer.critic.gradient_checkpointing=false",
        "trainer.policy.optimizer.lr=1e-3",
        "trainer.critic.optimizer.lr=1e-3",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.train_batch_size=4",
        "trainer.policy_mini_batch_size=2",
        "trainer.critic_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=4",
        "trainer.micro_forward_batch_size_per_gpu=4",
        "generator.n_samples_per_prompt=4",
        "generator.sampling_params.max_generate_length=6",
        "generator.sampling_params.seed=123",
        "generator.eval_sampling_params.max_generate_length=6",
        "trainer.max_training_steps=1",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=0",
        "trainer.ckpt_interval=0",
        *output_overrides(out_dir),
    ]


def tiny_config(model_dir: str, data_dir: Path, out_dir: Path, *extra: str, colocate: bool = True) -> SkyRLConfig:
    """The tiny config with extra overrides applied last."""
    return SkyRLConfig.from_cli_overrides(tiny_overrides(model_dir, data_dir, out_dir, colocate) + list(extra))


@pytest.fixture(scope="session")
def make_config():
    """`make_config(model_dir, data_dir, out_dir, *overrides, colocate=True) -> SkyRLConfig`."""
    return tiny_config


@pytest.fixture(scope="session")
def make_overrides():
    """`make_overrides(model_dir, data_dir, out_dir, colocate=True) -> list[str]`: the tiny config as the command-line
    overrides of a `main_base` process."""
    return tiny_overrides


QUICKSTART_MODEL = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
LOGPROB_AGREEMENT = 1e-4  # fp32: trainer vs server logprobs of the same tokens under the same weights


class RemoteRunHelpers:
    """What the `remote` backend's trainer tests share (a server process, a run config, the checks)."""

    @staticmethod
    def model_dir() -> str:
        """The quickstart's warm-started model (its rewards differ within a group, so step 1 changes the weights)."""
        return str(get_embedded_model(QUICKSTART_MODEL, progress=False))

    @staticmethod
    def wait_until_serving(url: str, process: subprocess.Popen, timeout_s: float = 300.0) -> None:
        """Poll `url/health` until it answers; fail with the server's output if it exits or never answers."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}: {process.stdout.read()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        process.kill()
        raise RuntimeError(f"the server at {url} did not answer within {timeout_s} s: {process.stdout.read()[-3000:]}")

    @staticmethod
    def config(make_config, model_dir, tmp_path, url, *extra):
        """Two quickstart-like steps on the addition task through one remote engine."""
        write_dataset(tmp_path / "data", "addition", train_size=64, test_size=4, difficulty=2, seed=3)
        return make_config(
            model_dir,
            tmp_path / "data",
            tmp_path,
            "environment.env_class=addition",
            "generator.inference_engine.backend=remote",
            f"generator.inference_engine.remote_urls=['{url}']",
            "generator.inference_engine.num_engines=1",
            "trainer.policy.optimizer.lr=1e-3",
            "trainer.train_batch_size=8",
            "trainer.policy_mini_batch_size=4",
            "trainer.max_training_steps=2",
            *extra,
            colocate=False,
        )

    @classmethod
    def train_through(cls, make_config, tmp_path, model_dir, command, port, env=None, extra=()) -> None:
        """Start the server `command` (listening on `port`), run two verified steps through it (config overrides
        `extra` added), check them, stop it."""
        from skyrl_train.entrypoints.main_base import BasePPOExp

        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            cls.wait_until_serving(url, server)
            cfg = cls.config(make_config, model_dir, tmp_path, url, *extra)
            cls.check(BasePPOExp(cfg, verify_weight_sync=True).run())
        finally:
            server.terminate()
            server.wait(timeout=60)

    @staticmethod
    def check(result) -> None:
        """The server took and served every synced version, verified by checksum, and step 2 sampled what the trainer
        held after step 1."""
        history = result.history
        assert result.global_step == 2
        assert dict(history["policy/grad_norm"])[1] > 0  # the weights changed before step 2's rollouts
        assert [version for _, version in history["weight_sync/version"]][-1] == 3.0  # initial sync, then one per step
        assert all(count > 0 for _, count in history["weight_sync/verified_tensors"])
        assert all(value < LOGPROB_AGREEMENT for _, value in history["policy/rollout_train_logprob_abs_diff_mean"])


@pytest.fixture(scope="session")
def remote_run():
    """`RemoteRunHelpers`: the shared parts of the remote-backend trainer tests."""
    return RemoteRunHelpers
