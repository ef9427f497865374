"""otelsignals: finds the LLM-agent conversations worth a look in OpenTelemetry traces."""

from otelsignals import native

# Before any compiled module is imported: their source runs instead when they were built from
# another one (see native.py).
native.choose()
