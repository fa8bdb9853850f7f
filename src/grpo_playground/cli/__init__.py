"""The product's command lines. `args` defines each CLI's arguments once (a dataclass per CLI), from which the
parser, a child's argv and the UI's "Equivalent CLI" string are derived; light: the UI imports it."""
