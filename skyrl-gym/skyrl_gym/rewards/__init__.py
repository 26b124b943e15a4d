"""Rule-based answer extraction and checking shared by the reward functions of the built-in environments.

Modules (import the one you need; nothing heavy is imported by this package itself):

- `numbers`: GSM8K-style final-number extraction ("#### 1,234" / last number), normalisation, exact comparison.
- `answer_extraction`: the last `\\boxed{}` / `\\fbox{}` or `Answer:` line of a math response, bounded scans.
- `math_normalization`: meaning-preserving LaTeX cleanup and plain-number reading.
- `math_equivalence`: `is_equivalent` (math-verify with a deadline, sympy fallback) and `grade_math_response`.
- `sympy_fallback`: the size screen for parsed expressions and the restricted sympy comparison.
- `exact_match`: SQuAD-style normalised exact match of short answers (used by the search env).
- `deadline`: `run_with_deadline`, a thread-safe wall-clock limit.
"""
