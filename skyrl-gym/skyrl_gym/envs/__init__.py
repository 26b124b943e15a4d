"""Built-in environments, registered by id with lazy "module:Class" entry points (nothing heavy is imported until
an env is made)."""

from skyrl_gym.envs.registration import register

BUILTIN_ENVS: dict[str, str] = {
    "gsm8k": "skyrl_gym.envs.gsm8k.env:GSM8KEnv",
    "gsm8k_multi_turn": "skyrl_gym.envs.gsm8k.multi_turn:GSM8KMultiTurnEnv",
    "math": "skyrl_gym.envs.math.env:MathEnv",
    "aime": "skyrl_gym.envs.math.env:AIMEEnv",
    "arithmetic": "skyrl_gym.envs.synthetic.arithmetic:ArithmeticEnv",
    "addition": "skyrl_gym.envs.synthetic.addition:AdditionEnv",
    "countdown": "skyrl_gym.envs.synthetic.countdown:CountdownEnv",
    "reverse": "skyrl_gym.envs.synthetic.reverse:ReverseEnv",
    "code": "skyrl_gym.envs.code.env:CodeEnv",
    "lcb": "skyrl_gym.envs.code.lcb:LCBEnv",
    "text2sql": "skyrl_gym.envs.text2sql.env:Text2SQLEnv",
    "search": "skyrl_gym.envs.search.env:SearchEnv",
    "searchcode": "skyrl_gym.envs.searchcode.env:SearchCodeEnv",
    "mcp": "skyrl_gym.envs.mcp.env:MCPEnv",
    "openenv": "skyrl_gym.envs.openenv.env:OpenEnvEnv",
    "multiply": "skyrl_gym.envs.multiply.env:MultiplyEnv",
    "llm_as_a_judge": "skyrl_gym.envs.llm_judge.env:LLMJudgeEnv",
}

for _env_id, _entry_point in BUILTIN_ENVS.items():
    register(_env_id, _entry_point)
