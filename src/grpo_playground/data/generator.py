"""GSM8K-style word problems written by us: seeded, graded by difficulty, with worked solutions.

`level` is the number of arithmetic operations in the solution (1..5). Every problem is a short story
around one running quantity (apples, dollars, km, ...): a start value, then changes to it, then a final
question; each solution step is one sentence that carries its arithmetic ("..., so 3 * 12 = 36 pens.").
Numbers stay small and grow with the level (levels 1-2: operands up to 25-30, values under ~130; level 5:
operands up to 120, values up to 999) so a model of a few million parameters can learn the easy levels
and still has headroom on the hard ones.

Train and test never share a problem: a problem's split is decided by a hash of its canonical form
(template + the sequence of operations and numbers, names and wording left out), so the same arithmetic
told with another name can never appear on both sides.

    >>> from grpo_playground.data.generator import generate_problems, format_solution
    >>> p = generate_problems(1, split="train", seed=0, levels=(2,))[0]
    >>> p.level
    2
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Sequence

from grpo_playground.data.examples import format_completion
from grpo_playground.tags import DEFAULT_TAGS, Tags

LEVELS = (1, 2, 3, 4, 5)
SPLITS = ("train", "test")
TEST_PERCENT = 20  # share of canonical problems that belong to the test split
MAX_VALUE = 999  # every intermediate value stays in 1..MAX_VALUE
MAX_PROBLEMS = 1_000_000  # bound on one call: the generator is fast, but memory is not free


@dataclass(frozen=True)
class Problem:
    question: str
    solution_steps: list[str]
    answer: str
    level: int
    template: str
    canonical: str = ""  # template + operations + numbers: what decides the split

    @property
    def split(self) -> str:
        return split_of(self.canonical)


def split_of(canonical: str) -> str:
    """'test' for TEST_PERCENT% of canonical problems, 'train' for the rest (stable across runs and machines)."""
    digest = hashlib.sha256(canonical.encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % 100 < TEST_PERCENT else "train"


# ----------------------------------------------------------------------------------------------------
# Wording. A theme is one running quantity with clauses for each kind of change. Placeholders:
# {name} protagonist, {P}/{p}/{o} pronoun, {other} a second person, {n} an amount, {k} {m} a count and a size.
# ----------------------------------------------------------------------------------------------------

NAMES = (
    ("Mia", "She"), ("Noah", "He"), ("Ava", "She"), ("Liam", "He"), ("Zoe", "She"), ("Omar", "He"),
    ("Lena", "She"), ("Ravi", "He"), ("Sofia", "She"), ("Ken", "He"), ("Nina", "She"), ("Tom", "He"),
    ("Aisha", "She"), ("Leo", "He"), ("Emma", "She"), ("Sam", "He"), ("Yuki", "She"), ("Ivan", "He"),
    ("Maya", "She"), ("Jack", "He"), ("Lucia", "She"), ("Ben", "He"), ("Chloe", "She"), ("Diego", "He"),
)


@dataclass(frozen=True)
class _Theme:
    name: str
    unit: str  # what the running quantity counts, used after every result ("= 36 pens")
    start: tuple[str, ...]  # {n}
    start_group: tuple[str, ...]  # {k} groups of {m}: the first operation is k * m
    add: tuple[str, ...]  # {n}
    sub: tuple[str, ...]  # {n}
    group_add: tuple[str, ...]  # {k} {m}: two operations, k * m then add
    group_sub: tuple[str, ...]  # {k} {m}: two operations, k * m then subtract
    share: tuple[tuple[str, str], ...]  # ({k} clause, question): the last operation divides
    times: tuple[tuple[str, str], ...]  # ({k} clause, question): the last operation multiplies
    ask: tuple[str, ...]  # the question when the story ends on an addition or subtraction


THEMES = (
    _Theme(
        name="shopping", unit="dollars",
        start=("{name} has ${n}.", "{name} goes to the mall with ${n}."),
        start_group=("{name} earns ${m} a day for {k} days.", "{name} gets {k} gift cards worth ${m} each."),
        add=("{P} finds ${n} in an old coat.", "{P} gets ${n} from {other}."),
        sub=("{P} spends ${n} on a book.", "{P} pays ${n} for lunch.", "{P} buys a hat for ${n}."),
        group_add=("{P} sells {k} old games for ${m} each.",),
        group_sub=("{P} buys {k} shirts that cost ${m} each.", "{P} buys {k} pens at ${m} each."),
        share=(("{P} splits the money equally among {k} jars.", "How many dollars go in each jar?"),),
        times=(("{other} has {k} times as much money as {name}.", "How many dollars does {other} have?"),),
        ask=("How many dollars does {name} have now?", "How much money, in dollars, does {name} have left?"),
    ),
    _Theme(
        name="baking", unit="cookies",
        start=("{name} bakes {n} cookies.", "There are {n} cookies in {name}'s kitchen."),
        start_group=("{name} bakes {k} trays of {m} cookies.",),
        add=("{P} bakes {n} more cookies.", "{other} brings {n} cookies."),
        sub=("{P} eats {n} cookies.", "{P} gives {n} cookies to {other}.", "{n} cookies burn and are thrown away."),
        group_add=("{P} bakes {k} more trays of {m} cookies.",),
        group_sub=("{P} gives {k} neighbours {m} cookies each.",),
        share=(("{P} packs the cookies equally into {k} boxes.", "How many cookies are in each box?"),),
        times=(("{other} bakes {k} times as many cookies as {name} has now.", "How many cookies does {other} bake?"),),
        ask=("How many cookies does {name} have now?", "How many cookies are left?"),
    ),
    _Theme(
        name="travel", unit="km",
        start=("{name} drives {n} km on Monday.", "{name} cycles {n} km in the morning."),
        start_group=("{name} drives at {m} km per hour for {k} hours.", "{name} makes {k} trips of {m} km each."),
        add=("Then {p} drives {n} km more.", "On the way back {p} takes a detour of {n} km."),
        sub=("A road is closed and {p} cuts {n} km from the route.", "{P} takes a shortcut that saves {n} km."),
        group_add=("The next day {p} rides {k} laps of {m} km.",),
        group_sub=("{P} skips {k} stages of {m} km each.",),
        share=(("{P} splits the distance equally over {k} days.", "How many km does {name} travel each day?"),),
        times=(("{other} travels {k} times as far as {name}.", "How many km does {other} travel?"),),
        ask=("How many km does {name} travel in total?",),
    ),
    _Theme(
        name="savings", unit="dollars",
        start=("{name} has ${n} in a piggy bank.",),
        start_group=("{name} saves ${m} each week for {k} weeks.", "{name} puts ${m} in the bank every month for {k} months."),
        add=("{P} gets ${n} for a birthday.", "{P} earns ${n} walking dogs."),
        sub=("{P} takes out ${n} for a game.", "{P} spends ${n} on a gift for {other}."),
        group_add=("{P} works {k} hours at ${m} per hour.",),
        group_sub=("{P} pays {k} bills of ${m} each.",),
        share=(("{P} divides the savings equally among {k} months of a trip.", "How many dollars can {name} spend each month?"),),
        times=(("{other} has saved {k} times as much as {name}.", "How many dollars has {other} saved?"),),
        ask=("How many dollars has {name} saved now?", "How many dollars does {name} have in the end?"),
    ),
    _Theme(
        name="sharing", unit="stickers",
        start=("{name} has {n} stickers.", "{name} collects {n} stickers."),
        start_group=("{name} buys {k} sheets with {m} stickers each.",),
        add=("{other} gives {o} {n} more stickers.", "{P} wins {n} stickers in a game."),
        sub=("{P} gives {n} stickers to {other}.", "{P} loses {n} stickers."),
        group_add=("{P} buys {k} more sheets of {m} stickers.",),
        group_sub=("{P} gives {k} friends {m} stickers each.",),
        share=(("{P} shares all the stickers equally among {k} friends.", "How many stickers does each friend get?"),),
        times=(("{other} has {k} times as many stickers as {name}.", "How many stickers does {other} have?"),),
        ask=("How many stickers does {name} have now?",),
    ),
    _Theme(
        name="rates", unit="toys",
        start=("A machine in {name}'s workshop has made {n} toys.",),
        start_group=("A machine makes {m} toys per hour and runs for {k} hours.", "{name} builds {m} toys a day for {k} days."),
        add=("Then it makes {n} more toys.", "{other} adds {n} toys to the pile."),
        sub=("{n} toys are broken and thrown away.", "{name} sells {n} toys."),
        group_add=("A second machine makes {m} toys per hour for {k} hours.",),
        group_sub=("{name} ships {k} crates of {m} toys.",),
        share=(("{name} packs the toys into {k} equal boxes.", "How many toys are in each box?"),),
        times=(("A bigger factory makes {k} times as many toys.", "How many toys does the bigger factory make?"),),
        ask=("How many toys are there now?", "How many toys does {name} have in the end?"),
    ),
    _Theme(
        name="garden", unit="plants",
        start=("{name} has {n} plants in a garden.",),
        start_group=("{name} plants {k} rows of {m} tomato plants.",),
        add=("{P} plants {n} more.", "{other} gives {o} {n} plants."),
        sub=("Rabbits eat {n} plants.", "{P} moves {n} plants to a pot."),
        group_add=("{P} adds {k} rows of {m} beans.",),
        group_sub=("{P} gives {k} neighbours {m} plants each.",),
        share=(("{P} waters them in {k} equal groups.", "How many plants are in each group?"),),
        times=(("{other}'s garden has {k} times as many plants.", "How many plants are in {other}'s garden?"),),
        ask=("How many plants does {name} have now?",),
    ),
    _Theme(
        name="library", unit="books",
        start=("A school library has {n} books.", "{name} owns {n} books."),
        start_group=("{name} buys {k} boxes of {m} books.",),
        add=("{name} donates {n} books.", "The library buys {n} new books."),
        sub=("Students borrow {n} books.", "{n} old books are given away."),
        group_add=("{k} classes each return {m} books.",),
        group_sub=("{k} teachers each borrow {m} books.",),
        share=(("The books are put equally on {k} shelves.", "How many books are on each shelf?"),),
        times=(("The city library has {k} times as many books.", "How many books does the city library have?"),),
        ask=("How many books are there now?",),
    ),
    _Theme(
        name="farm", unit="eggs",
        start=("{name} collects {n} eggs.",),
        start_group=("{name}'s {k} hens lay {m} eggs each.", "{name} collects {m} eggs a day for {k} days."),
        add=("{P} buys {n} more eggs at the market.", "{other} brings {n} eggs."),
        sub=("{P} uses {n} eggs for a cake.", "{n} eggs break."),
        group_add=("{k} ducks lay {m} eggs each.",),
        group_sub=("{P} sells {k} cartons of {m} eggs.",),
        share=(("{P} puts the eggs into {k} equal baskets.", "How many eggs are in each basket?"),),
        times=(("{other}'s farm has {k} times as many eggs.", "How many eggs does {other}'s farm have?"),),
        ask=("How many eggs does {name} have now?",),
    ),
    _Theme(
        name="sports", unit="points",
        start=("{name} scores {n} points in the first game.",),
        start_group=("{name} scores {k} baskets worth {m} points each.",),
        add=("In the next game {p} scores {n} points.", "{P} gets {n} bonus points."),
        sub=("{P} loses {n} points for a foul.",),
        group_add=("{P} then makes {k} shots worth {m} points each.",),
        group_sub=("{P} gets {k} penalties of {m} points each.",),
        share=(("The points are split equally among {k} players.", "How many points does each player get?"),),
        times=(("{other} scores {k} times as many points as {name}.", "How many points does {other} score?"),),
        ask=("How many points does {name} have now?",),
    ),
    _Theme(
        name="school", unit="students",
        start=("A school has {n} students in grade five.",),
        start_group=("There are {k} classes with {m} students each.",),
        add=("{n} new students join.",),
        sub=("{n} students move to another school.", "{n} students are sick at home."),
        group_add=("{k} more groups of {m} students arrive for a visit.",),
        group_sub=("{k} buses take {m} students each on a trip.",),
        share=(("The students form {k} equal teams.", "How many students are on each team?"),),
        times=(("Another school has {k} times as many students.", "How many students does the other school have?"),),
        ask=("How many students are there now?",),
    ),
)


# ----------------------------------------------------------------------------------------------------
# Building one problem
# ----------------------------------------------------------------------------------------------------

class _Reject(Exception):
    """The drawn numbers broke a bound (negative, too large, not divisible): draw again."""


def _check(value: int) -> int:
    if not 1 <= value <= MAX_VALUE:
        raise _Reject
    return value


def _clause(rng: random.Random, options: Sequence[str], used: set[str], **fields: object) -> str:
    """A clause not yet used in this story when one is left ("gets $5 for a birthday" twice reads oddly)."""
    fresh = [o for o in options if o not in used] or list(options)
    option = rng.choice(fresh)
    used.add(option)
    return option.format(**fields)


def _without_period(sentence: str) -> str:
    return sentence[:-1] if sentence.endswith(".") else sentence


# Number sizes grow with the level too, so levels 1-2 are learnable by a ~1M-parameter model in minutes
# and the hard levels keep headroom: (start value, amount, group size) upper bounds.
_SIZES = {1: (50, 25, 12), 2: (60, 30, 12), 3: (150, 60, 20), 4: (250, 80, 20), 5: (300, 120, 20)}


def _chain_problem(rng: random.Random, theme: _Theme, level: int) -> Problem:
    (name, pronoun), (other, _) = rng.sample(NAMES, 2)
    names = {"name": name, "P": pronoun, "p": pronoun.lower(), "o": "her" if pronoun == "She" else "him", "other": other}
    unit = theme.unit
    story: list[str] = []
    steps: list[str] = []
    canon: list[str] = [theme.name]
    used: set[str] = set()
    ops_left = level
    start_max, amount_max, group_max = _SIZES[level]

    # The last operation may divide or multiply (it changes what is counted, so it ends the story).
    ending = rng.choice(["ask", "ask", "share", "times"]) if ops_left >= 1 else "ask"
    if ending != "ask":
        ops_left -= 1

    if ops_left >= 1 and rng.random() < 0.4:
        k, m = rng.randint(2, 9), rng.randint(2, group_max + 10)
        value = _check(k * m)
        sentence = _clause(rng, theme.start_group, used, k=k, m=m, **names)
        story.append(sentence)
        steps.append(f"{_without_period(sentence)}, so {k} * {m} = {value} {unit}.")
        canon.append(f"{k}*{m}")
        ops_left -= 1
    else:
        value = rng.randint(10, start_max)
        sentence = _clause(rng, theme.start, used, n=value, **names)
        story.append(sentence)
        steps.append(f"Start with {value} {unit}.")
        canon.append(str(value))

    while ops_left > 0:
        kinds = ["add", "sub"] + (["group_add", "group_sub"] if ops_left >= 2 else [])
        kind = rng.choice(kinds)
        if kind in ("add", "sub"):
            n = rng.randint(2, amount_max)
            sentence = _clause(rng, getattr(theme, kind), used, n=n, **names)
            sign = "+" if kind == "add" else "-"
            new = _check(value + n if kind == "add" else value - n)
            steps.append(f"{_without_period(sentence)}, so {value} {sign} {n} = {new} {unit}.")
            canon.append(f"{sign}{n}")
            ops_left -= 1
        else:
            k, m = rng.randint(2, 9), rng.randint(2, group_max)
            sentence = _clause(rng, getattr(theme, kind), used, k=k, m=m, **names)
            group = _check(k * m)
            sign = "+" if kind == "group_add" else "-"
            new = _check(value + group if kind == "group_add" else value - group)
            steps.append(f"{_without_period(sentence)}, so {k} * {m} = {group} {unit}.")
            steps.append(f"That makes {value} {sign} {group} = {new} {unit}.")
            canon.append(f"{sign}{k}*{m}")
            ops_left -= 2
        story.append(sentence)
        value = new

    if ending == "share":
        divisors = [d for d in range(2, 10) if value % d == 0 and value // d >= 1]
        if not divisors:
            raise _Reject
        k = rng.choice(divisors)
        clause, question = rng.choice(theme.share)
        sentence = clause.format(k=k, **names)
        new = value // k
        steps.append(f"{_without_period(sentence)}, so {value} / {k} = {new} {unit}.")
        canon.append(f"/{k}")
    elif ending == "times":
        k = rng.randint(2, 5)
        clause, question = rng.choice(theme.times)
        sentence = clause.format(k=k, **names)
        new = _check(value * k)
        steps.append(f"{_without_period(sentence)}, so {value} * {k} = {new} {unit}.")
        canon.append(f"*{k}")
    else:
        sentence, question, new = "", rng.choice(theme.ask), value
    if sentence:
        story.append(sentence)
    story.append(question.format(**names))
    return Problem(
        question=" ".join(story), solution_steps=steps, answer=str(new), level=level,
        template=theme.name, canonical="|".join(canon),
    )


def _ages_problem(rng: random.Random, level: int) -> Problem:
    people = rng.sample(NAMES, level + 1)
    first = people[0][0]
    value = rng.randint(3, 15)
    story = [f"{first} is {value} years old."]
    steps = [f"{first} is {value} years old."]
    canon = ["ages", str(value)]
    for (prev, _), (person, _) in zip(people, people[1:]):
        kind = rng.choice(["older", "younger", "times", "half"])
        if kind == "older":
            n = rng.randint(2, 30)
            sentence, expr, new = f"{person} is {n} years older than {prev}.", f"{value} + {n}", value + n
        elif kind == "younger" and value > 3:
            n = rng.randint(1, value - 2)
            sentence, expr, new = f"{person} is {n} years younger than {prev}.", f"{value} - {n}", value - n
        elif kind == "times" and value <= 40:
            k = rng.randint(2, 4)
            sentence, expr, new = f"{person} is {k} times as old as {prev}.", f"{value} * {k}", value * k
        elif kind == "half" and value % 2 == 0 and value >= 4:
            sentence, expr, new = f"{person} is half as old as {prev}.", f"{value} / 2", value // 2
        else:
            n = rng.randint(2, 20)
            sentence, expr, new = f"{person} is {n} years older than {prev}.", f"{value} + {n}", value + n
        value = _check(new)
        story.append(sentence)
        steps.append(f"{_without_period(sentence)}, so {person} is {expr} = {value} years old.")
        canon.append(expr.split(" ", 1)[1].replace(" ", ""))
    last = people[-1][0]
    story.append(f"How old is {last}?")
    return Problem(
        question=" ".join(story), solution_steps=steps, answer=str(value), level=level,
        template="ages", canonical="|".join(canon),
    )


TEMPLATES = tuple(theme.name for theme in THEMES) + ("ages",)


def _one_problem(rng: random.Random, level: int) -> Problem:
    template = rng.choice(TEMPLATES)
    while True:
        try:
            if template == "ages":
                return _ages_problem(rng, level)
            return _chain_problem(rng, next(t for t in THEMES if t.name == template), level)
        except _Reject:
            continue


# ----------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------

def generate_problems(
    n: int,
    split: str = "train",
    seed: int = 0,
    levels: Sequence[int] = LEVELS,
    weights: Sequence[float] | None = None,
) -> list[Problem]:
    """`n` distinct problems of the given split; the same arguments always give the same list.

    levels: difficulties to draw from (number of operations, 1..5); weights: relative frequency of
    each level (default: equal).
    """
    if not isinstance(n, int) or not 0 <= n <= MAX_PROBLEMS:
        raise ValueError(f"n={n!r}: ask for an integer number of problems between 0 and {MAX_PROBLEMS}")
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: use 'train' or 'test'")
    levels = tuple(levels)
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels={levels!r}: give one or more difficulty levels from {LEVELS}")
    if weights is not None:
        weights = tuple(float(w) for w in weights)
        if len(weights) != len(levels) or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(
                f"weights={weights!r}: give one non-negative weight per level {levels}, not all zero"
            )

    # A string seed is hashed deterministically by `random` (unlike hash()), and gives each split its own stream.
    rng = random.Random(f"grpo-playground:{seed}:{split}")
    problems: list[Problem] = []
    seen: set[str] = set()
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise RuntimeError(
                f"could not find {n} distinct {split} problems at levels {levels}: ask for fewer or widen levels"
            )
        level = rng.choices(levels, weights=weights)[0]
        problem = _one_problem(rng, level)
        if problem.split != split or problem.question in seen:
            continue
        seen.add(problem.question)
        problems.append(problem)
    return problems


def format_solution(problem: Problem, tags: Tags = DEFAULT_TAGS) -> str:
    """The recipe's SFT target: `<start_working_out>steps\\nThe answer is N.<end_working_out><SOLUTION>N</SOLUTION>`.

    The reasoning ends with tiny's pretraining cue so the model copies its own result into <SOLUTION>:
    without it, 120 SFT steps on 200 such problems copied 3% of the time, with it 90% (results/tiny_copy_rate.md)."""
    return format_completion(plain_solution(problem), problem.answer, tags)


def plain_solution(problem: Problem) -> str:
    """The worked solution in plain language with no tags, ending 'The answer is N.' (pretraining text)."""
    return "\n".join(problem.solution_steps + [f"The answer is {problem.answer}."])
