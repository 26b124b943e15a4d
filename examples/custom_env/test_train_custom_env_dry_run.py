"""`train_custom_env.py --dry-run`: the user env is registered, so the config naming it validates and prints."""

from train_custom_env import main


def test_dry_run_prints_the_config_with_the_user_env_and_writes_nothing(tmp_path, capsys):
    argv = ["--dry-run", "environment.env_configs.digit_credit.exact_bonus=0.0", "--out", str(tmp_path / "ce")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# resolved SkyRL config\n")
    assert '  env_class: "digit_credit"\n' in printed
    assert "    digit_credit:\n      exact_bonus: 0.0\n" in printed
    assert not (tmp_path / "ce").exists()
