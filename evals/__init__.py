"""Evaluations run against a live server or the installed libraries."""
