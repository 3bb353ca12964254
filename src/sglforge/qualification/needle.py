"""The needle-recall prompt: filler of a target length with a passphrase in the middle,
used by the smoke's needle check (smoke/checks.py) and the needle gate (gates.py)."""

from __future__ import annotations

FILLER = (
    "The river bends twice before it reaches the old mill at the edge of town.",
    "Farmers in the valley plant barley in spring and harvest it late in summer.",
    "A narrow bridge of grey stone carries the road across the gorge.",
    "In winter the market moves indoors to the long hall beside the church.",
    "Travellers often stop at the inn for bread, cheese and a bowl of soup.",
    "The library keeps maps of the region drawn more than two centuries ago.",
    "Children walk along the canal path to the school on the hill each morning.",
    "Every autumn the orchards fill with pickers who come from neighbouring villages.",
)


def needle_prompt(target_tokens: int, words_per_token: float, passphrase: str) -> str:
    """Filler of about `target_tokens`, the needle in the middle, the question at the end."""
    target_words = max(16, int(target_tokens * words_per_token))
    words: list[str] = []
    index = 0
    while len(words) < target_words:
        words += FILLER[index % len(FILLER)].split()
        index += 1
    words = words[:target_words]
    needle = f"Remember this: the secret passphrase is {passphrase}."
    middle = len(words) // 2
    body = " ".join(words[:middle]) + f" {needle} " + " ".join(words[middle:])
    return (
        f"{body}\n\nQuestion: what is the secret passphrase mentioned in the text above?\n"
        "Answer: the passphrase is"
    )


def passphrase_for(length: int) -> str:
    words = ("amber", "cobalt", "juniper", "saffron", "violet", "indigo")
    return f"{words[length % len(words)]}-{(length * 7919) % 9000 + 1000}"
