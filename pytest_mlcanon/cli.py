"""The mlcanon command (placeholder)."""


def main() -> int:
    return 0
