"""The safe expression evaluator: what it computes, and everything it must refuse."""

from __future__ import annotations

import ast

import pytest

from astra_graph.kernel import expr


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("tokens * d", {"tokens": 3, "d": 8}, 24),
        ("3 * tokens * d * elem_bytes", {"tokens": 2, "d": 8, "elem_bytes": 2}, 96),
        ("min(d // 8, 1024)", {"d": 16384}, 1024),
        ("max(1, d // 64)", {"d": 32}, 1),
        ("ceil_div(heads, 4)", {"heads": 7}, 2),
        ("ceil_div(8, 4)", {}, 2),
        ("round_up(33, 32)", {}, 64),
        ("round_up(hidden // 8, 32)", {"hidden": 8}, 32),
        ("log2(1024)", {}, 10),
        ("2 ** 10 - 1", {}, 1023),
        ("-d + 10", {"d": 3}, 7),
        ("+d", {"d": 3}, 3),
        ("d % 8", {"d": 20}, 4),
        ("d / 4", {"d": 10}, 2.5),
        ("(tokens, ceil_div(heads, 4))", {"tokens": 5, "heads": 9}, (5, 3)),
    ],
)
def test_evaluate_computes(text: str, env: dict[str, int], expected: object) -> None:
    assert expr.evaluate(text, env) == expected


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("d % 8 == 0", {"d": 24}, True),
        ("d % 8 == 0", {"d": 20}, False),
        ("1 <= d <= 8", {"d": 8}, True),
        ("1 <= d <= 8", {"d": 9}, False),
        ("d > 0 and d < 4", {"d": 2}, True),
        ("d > 4 or d < 0", {"d": 2}, False),
        ("d != 3", {"d": 3}, False),
    ],
)
def test_evaluate_comparisons(text: str, env: dict[str, int], expected: bool) -> None:
    assert expr.evaluate(text, env) is expected


def test_numbers_pass_through() -> None:
    assert expr.evaluate(7, {}) == 7
    assert expr.evaluate(2.5, {}) == 2.5


def test_names_excludes_functions() -> None:
    assert expr.names("min(ceil_div(d, BLOCK), tokens) * elem_bytes") == {
        "d",
        "BLOCK",
        "tokens",
        "elem_bytes",
    }


def test_evaluate_int_accepts_whole_floats_and_refuses_fractions() -> None:
    assert expr.evaluate_int("d / 2", {"d": 8}) == 4
    assert isinstance(expr.evaluate_int("d / 2", {"d": 8}), int)
    with pytest.raises(expr.ExprError, match="expected a whole number"):
        expr.evaluate_int("d / 3", {"d": 8})
    with pytest.raises(expr.ExprError, match="expected a whole number"):
        expr.evaluate_int("d > 1", {"d": 8})


def test_evaluate_dims3_pads_to_three() -> None:
    assert expr.evaluate_dims3("tokens", {"tokens": 4}) == (4, 1, 1)
    assert expr.evaluate_dims3("(d // 8, 4)", {"d": 128}) == (16, 4, 1)
    assert expr.evaluate_dims3("(1, 2, 3)", {}) == (1, 2, 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(1, 2, 3, 4)", "1 to 3 numbers"),
        ("d - 8", "positive whole numbers"),
        ("(d, 0)", "positive whole numbers"),
        ("d / 3", "positive whole numbers"),
    ],
)
def test_evaluate_dims3_refuses(text: str, message: str) -> None:
    with pytest.raises(expr.ExprError, match=message):
        expr.evaluate_dims3(text, {"d": 8})


def test_booleans_are_not_expressions() -> None:
    with pytest.raises(expr.ExprError, match="boolean"):
        expr.evaluate(True, {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("d.real", "Attribute is not allowed"),
        ("d.bit_length()", "may be called"),
        ("().__class__", "Attribute is not allowed"),
        ("shape[0]", "Subscript is not allowed"),
        ("'abc'", "only numbers are allowed as constants"),
        ("d * 'x'", "only numbers are allowed as constants"),
        ("abs(d)", "may be called"),
        ("__import__('os')", "only numbers|may be called"),
        ("eval(d)", "may be called"),
        ("min(d, key=1)", "may be called"),
        ("lambda: 1", "Lambda is not allowed"),
        ("[d, 1]", "List is not allowed"),
        ("d if d else 1", "IfExp is not allowed"),
        ("d << 2", "LShift is not allowed"),
        ("not d", "Not is not allowed"),
        ("d +", "cannot parse"),
        ("", "cannot parse"),
        ("None", "only numbers are allowed as constants"),
        ("True * d", "only numbers are allowed as constants"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(expr.ExprError, match=message):
        expr.parse(text)


def test_unknown_name_is_refused_at_evaluation() -> None:
    with pytest.raises(expr.ExprError, match="unknown name 'hiden'"):
        expr.evaluate("tokens * hiden", {"tokens": 2, "hidden": 8})


@pytest.mark.parametrize(
    "text", ["d / 0", "d // (d - d)", "d % 0", "ceil_div(d, 0)", "round_up(d, 0)"]
)
def test_division_by_zero_is_an_expr_error(text: str) -> None:
    with pytest.raises(expr.ExprError, match="cannot evaluate"):
        expr.evaluate(text, {"d": 8})


def test_function_with_wrong_arity_is_an_expr_error() -> None:
    with pytest.raises(expr.ExprError, match="cannot evaluate"):
        expr.evaluate("ceil_div(d)", {"d": 8})


def test_overflow_is_an_expr_error() -> None:
    with pytest.raises(expr.ExprError, match="cannot evaluate"):
        expr.evaluate("10.0 ** 400", {})


def test_huge_exponents_are_refused_not_computed() -> None:
    with pytest.raises(expr.ExprError, match="exponent"):
        expr.evaluate("9 ** 9 ** 9 > 0", {})
    assert expr.evaluate("2 ** 10", {}) == 1024


def test_an_equation_gives_its_two_sides_and_nothing_else_is_one() -> None:
    sides = expr.equation("hidden_size * 2 == d_in")
    assert sides is not None
    assert [ast.unparse(s) for s in sides] == ["hidden_size * 2", "d_in"]
    for other in ("a <= b", "a == b == c", "a != b", "a + b", "a == (", "f(x) == 1"):
        assert expr.equation(other) is None, other


def test_shifts_split_as_operators_and_templates_still_nest() -> None:
    assert expr.split_top_level("a << 2, b") == ["a << 2", "b"]
    assert expr.split_top_level("a >> 2, b") == ["a >> 2", "b"]
    assert expr.split_top_level("A<B<C>>, d") == ["A<B<C>>", "d"]
    assert expr.split_top_level("f(a > b, c), g->h") == ["f(a > b, c)", "g->h"]
