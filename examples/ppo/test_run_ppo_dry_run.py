"""`run_ppo.py --dry-run`: the resolved config with the command line's overrides; nothing is built or written."""

from run_ppo import main


def test_dry_run_prints_the_config_and_writes_nothing(tmp_path, capsys):
    assert main(["trainer.max_training_steps=7", "--out", str(tmp_path / "ppo"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# resolved SkyRL config\n")
    assert "  max_training_steps: 7\n" in printed
    assert f'  ckpt_path: "{tmp_path / "ppo" / "ckpts"}"\n' in printed
    assert "\n# derived: needs_ref_model=True needs_critic=True needs_reward_model=False\n" in printed
    assert not (tmp_path / "ppo").exists()
