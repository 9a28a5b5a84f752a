"""Internals of the Protobuf schema format: the `.proto` model, its parser and printer, the
descriptor conversions, the well-known files and the compatibility diff.

The public face is `strom.registry.formats.protobuf`; nothing here is imported from elsewhere.
"""
