"""Property tests: printed statements parse back to the same AST; canonical text ignores renaming."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tensoralg.notation import (
    FUNCTIONS,
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Literal,
    Mul,
    Neg,
    Sub,
    canonical_text,
    format_statement,
    free_indices,
    parse_einsum,
    parse_statement,
    rename_indices,
)
from tensoralg.notation.reductions import common_prefix, free_uses, wrap_at

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None)

RANKS = {"A": 2, "B": 2, "C": 3, "x": 1, "w": 1, "alpha": 0, "T_2": 1}
INDICES = ["i", "j", "k", "l"]


@st.composite
def accesses(draw):
    tensor = draw(st.sampled_from(sorted(RANKS)))
    return Access(tensor, tuple(draw(st.sampled_from(INDICES)) for _ in range(RANKS[tensor])))


literals = st.one_of(
    st.integers(-10**6, 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
).map(Literal)


def _extend(children):
    binary = st.tuples(st.sampled_from([Add, Sub, Mul, Div]), children, children)
    calls = st.sampled_from(sorted(FUNCTIONS)).flatmap(
        lambda f: st.tuples(*[children] * FUNCTIONS[f][0]).map(lambda args: Call(f, args)))
    return st.one_of(children.map(Neg), binary.map(lambda t: t[0](t[1], t[2])), calls)


expressions = st.recursive(st.one_of(accesses(), literals), _extend, max_leaves=10)


@st.composite
def statements(draw):
    """A valid statement: every index off the left side summed at or above its uses' ancestor."""
    rhs = draw(expressions)
    free = sorted(free_indices(rhs))
    lhs = draw(st.permutations(free).flatmap(lambda p: st.integers(0, len(p)).map(lambda n: p[:n])))
    placements: dict[tuple[int, ...], list[str]] = {}
    for index, paths in free_uses(rhs).items():
        if index not in lhs:
            lca = common_prefix(paths)
            placements.setdefault(lca[: draw(st.integers(0, len(lca)))], []).append(index)
    return Assignment(Access("out", tuple(lhs)), wrap_at(rhs, placements))


@SETTINGS
@given(statements())
def test_printed_statement_parses_back(stmt):
    assert parse_statement(format_statement(stmt)) == stmt


@SETTINGS
@given(expressions)
def test_parsed_statements_have_only_output_indices_free(rhs):
    text = f"out({','.join(sorted(free_indices(rhs)))}) = " if free_indices(rhs) else "out = "
    stmt = parse_statement(text + format_statement(Assignment(Access("z"), rhs)).split(" = ", 1)[1])
    assert free_indices(stmt.rhs) == set(stmt.lhs.indices)
    assert parse_statement(str(stmt)) == stmt


@st.composite
def einsum_cases(draw):
    letters = draw(st.lists(st.sampled_from("abcijkXY"), min_size=1, max_size=5, unique=True))
    terms = draw(st.lists(st.lists(st.sampled_from(letters), max_size=4), min_size=1, max_size=4))
    used = sorted({c for t in terms for c in t})
    text = ",".join("".join(t) for t in terms)
    explicit = draw(st.booleans()) or not text  # "" is an error, "->" a scalar copy
    if explicit:
        out = draw(st.permutations(used).flatmap(lambda p: st.integers(0, len(p)).map(lambda n: p[:n])))
        text += "->" + "".join(out)
    return text, [len(t) for t in terms]


@SETTINGS
@given(einsum_cases())
def test_einsum_results_print_and_parse_back(case):
    subscripts, ranks = case
    stmt = parse_einsum(subscripts, ranks)
    assert parse_statement(format_statement(stmt)) == stmt


@SETTINGS
@given(statements(), st.permutations(["p", "q", "r", "s"]))
def test_canonical_text_ignores_renaming(stmt, targets):
    renamed = rename_indices(stmt, dict(zip(INDICES, targets)))
    assert canonical_text(renamed) == canonical_text(stmt)
    assert parse_statement(canonical_text(stmt)) == rename_indices(
        stmt, {old: f"i{n}" for n, old in enumerate(_order(stmt))})


def _order(stmt):
    """Index names in order of first appearance in the printed statement."""
    import re
    text = format_statement(stmt)
    names = re.findall(r"sum\((\w+)|\(([\w,]+)\)", text)
    seen: dict[str, None] = {}
    for summed, index_list in names:
        for name in [summed] if summed else index_list.split(","):
            if name in INDICES:
                seen.setdefault(name, None)
    return list(seen)
