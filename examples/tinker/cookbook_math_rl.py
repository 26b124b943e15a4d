"""Run tinker-cookbook's `math_rl` recipe (`env=arithmetic`) unmodified against a local `skyrl-tx serve`.

The cookbook looks tokenizers up on the Hugging Face hub; this wrapper registers the served model's tokenizer folder
(get_info's `tokenizer_id`) under the model's name first, then hands the remaining `key=value` arguments to the
recipe's own chz entry point. Needs `pip install tinker-cookbook==0.5.8` (0.6.x needs tml-renderers>=0.4.1, which is
not on PyPI) next to tinker 0.38:

    python examples/tinker/cookbook_math_rl.py base_url=http://127.0.0.1:8000 model_name=skyrl/embedded-arithmetic \\
        renderer_name=role_colon lora_rank=8 group_size=4 groups_per_batch=8 max_steps=3 \\
        log_path=/tmp/math_rl behavior_if_log_dir_exists=delete
"""

from __future__ import annotations

import asyncio
import os
import sys

import chz
import tinker
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.recipes.math_rl import train
from transformers import AutoTokenizer


def served_tokenizer_folder(base_url: str, model_name: str) -> str:
    """The `tokenizer_id` the server gives for `model_name` (asked through a throwaway LoRA client)."""
    service = tinker.ServiceClient(base_url=base_url, api_key=os.environ.get("TINKER_API_KEY", "tml-cookbook"))
    training = service.create_lora_training_client(base_model=model_name, rank=1).result()
    folder = training.get_info().model_data.tokenizer_id
    service.close("success")
    return folder


def main(argv: list[str]) -> None:
    """Register the served tokenizer, then run the recipe with `argv` as its chz arguments."""
    values = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    folder = served_tokenizer_folder(values["base_url"], values["model_name"])
    tokenizer_utils.register_tokenizer(values["model_name"], lambda: AutoTokenizer.from_pretrained(folder))
    config = chz.entrypoint(train.CLIConfig, argv=argv)
    asyncio.run(train.cli_main(config))


if __name__ == "__main__":
    main(sys.argv[1:])
