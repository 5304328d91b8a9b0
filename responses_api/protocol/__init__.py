"""The pure protocol core: request/item/event types and conversions. Imports no Django."""
