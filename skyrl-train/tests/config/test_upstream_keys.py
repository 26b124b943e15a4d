"""NovaSky-AI/SkyRL's keys accepted as "what this project always does" (`Fixed`) store nothing and refuse every
other value by the feature it asks for; the settings of features that are off here (`Ignored`) belong to a feature
whose switch is refused."""

import pytest

from skyrl_train.config.errors import UnsupportedFeatureError
from skyrl_train.config.overrides import Override
from skyrl_train.config.upstream import same_value, translate_overrides
from skyrl_train.config.upstream_keys import RULES, UPSTREAM_NAMES, VALUE_RULES
from skyrl_train.config.upstream_rules import Fixed, Ignored, Refuse

_EXAMPLES = (True, False, None, 12345, "something-else", {"k": 1})


def _refused_example(rule: Fixed):
    """A value outside `rule.accepted`, of the accepted values' type when there is one; None when every value of a
    boolean key is accepted."""
    if {True, False} <= {value for value in rule.accepted if isinstance(value, bool)}:
        return None
    outside = [example for example in _EXAMPLES if not any(same_value(example, a) for a in rule.accepted)]
    kinds = {type(value) for value in rule.accepted if value is not None}
    return ([example for example in outside if type(example) in kinds] or outside)[0]


_FIXED = {key: rule for key, rule in RULES.items() if isinstance(rule, Fixed)}


@pytest.mark.parametrize("upstream", list(_FIXED))
def test_fixed_keys_store_nothing_and_refuse_other_values_by_feature(upstream):
    rule = _FIXED[upstream]
    for value in rule.accepted:
        translation = translate_overrides([Override(upstream, value, "set", f"{upstream}={value!r}")])
        assert not translation.problems and not translation.overrides, (upstream, value)
        assert translation.applied[0].note == rule.means
    example = _refused_example(rule)
    if example is None:
        assert not rule.feature, f"{upstream} accepts every value, so it names no feature to refuse"
        return
    translation = translate_overrides([Override(upstream, example, "set", f"{upstream}={example!r}")])
    [problem] = translation.problems
    assert isinstance(problem, UnsupportedFeatureError) and rule.feature in str(problem)
    assert "is not supported here" in str(problem)


@pytest.mark.parametrize("upstream", [key for key, rule in RULES.items() if isinstance(rule, Ignored)])
def test_ignored_settings_belong_to_a_feature_whose_switch_is_refused(upstream):
    switch = RULES[upstream].switch
    key, _, value = switch.partition("=")
    if key in _FIXED:
        assert _refused_example(_FIXED[key]) is not None, f"{upstream}: its switch {key} accepts every value"
    elif key in VALUE_RULES:  # a value of a shared key, refused by name
        assert any(isinstance(rule, Refuse) and given == value for given, rule in VALUE_RULES[key]), upstream
    else:  # a registry name this project lacks, e.g. policy_loss_type=dppo
        assert value in {name for _, name in UPSTREAM_NAMES}, f"{upstream}: switch {switch!r} is not refused"
