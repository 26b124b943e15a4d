"""Shared formatting of the rendered results blocks (scripts/render_doc_results.py and its renderer modules)."""

import statistics


def with_note(lines: list[str], note: str) -> str:
    """A block's markdown: `lines` (a table), a blank line, then `note` (what was run, where and when)."""
    return "\n".join([*lines, "", note]) + "\n"


def overrides_note(data: dict) -> str:
    """`; overrides: `a`, `b`` when the run had command-line overrides, else nothing."""
    return "; overrides: " + ", ".join(f"`{o}`" for o in data["overrides"]) if data.get("overrides") else ""


def plus_minus(stat: dict, digits: int = 2, signed: bool = False) -> str:
    """`mean ± standard error` of a `{mean, standard_error}` summary (`signed`: with a + on gains)."""
    sign = "+" if signed else ""
    return f"{stat['mean']:{sign}.{digits}f} ± {stat['standard_error']:.{digits}f}"


def trailing_mean(values: list[float], window: int) -> list[float]:
    """Each value averaged with the up to `window - 1` before it (no future leaks into a point)."""
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def mean_and_error(values: list[float]) -> str:
    """`mean±standard error` of repeated runs; the value alone for one run."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f}±{statistics.stdev(values) / len(values) ** 0.5:.3f}"
