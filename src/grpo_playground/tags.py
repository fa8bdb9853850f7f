"""The four format tags of the recipe and the system prompt built from them.

Every room (rewards, data, training, chat) takes a `Tags` value instead of hard-coding strings, so a
user who changes a tag in the UI changes it everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

MAX_TAG_CHARS = 64


@dataclass(frozen=True)
class Tags:
    reasoning_start: str = "<start_working_out>"
    reasoning_end: str = "<end_working_out>"
    solution_start: str = "<SOLUTION>"
    solution_end: str = "</SOLUTION>"

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"tag {name}={value!r} is empty: give a non-blank marker such as '<SOLUTION>'")
            if len(value) > MAX_TAG_CHARS:
                raise ValueError(f"tag {name} is {len(value)} characters long: keep tags under {MAX_TAG_CHARS}")
        values = list(asdict(self).values())
        if len(set(values)) != len(values):
            raise ValueError(f"tags must be four different strings, got {values}")

    def as_list(self) -> list[str]:
        return [self.reasoning_start, self.reasoning_end, self.solution_start, self.solution_end]

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


DEFAULT_TAGS = Tags()


def system_prompt(tags: Tags = DEFAULT_TAGS) -> str:
    """The recipe's system prompt: working between the reasoning tags, the answer between the solution tags."""
    return (
        "You are given a problem.\n"
        "Think about the problem and provide your working out.\n"
        f"Place it between {tags.reasoning_start} and {tags.reasoning_end}.\n"
        f"Then, provide your solution between {tags.solution_start}{tags.solution_end}"
    )
