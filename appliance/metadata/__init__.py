"""Metadata stores."""
