"""devtools.embedded: the embedded servers' own housekeeping."""

import os

from devtools.embedded import _tree_chown


def test_a_path_gone_between_the_listing_and_its_chown_is_skipped(tmp_path):
    """Before the embedded PostgreSQL starts or stops, its data folder is given to the user
    it runs as; while it runs it removes files of its own (its relation cache), and one
    gone between the folder's listing and its chown stopped `make bench` at its very end
    (FileNotFoundError). A dangling link is such a path: listed, not there to chown."""
    (tmp_path / "global").mkdir()
    (tmp_path / "global" / "pg_control").write_text("kept")
    (tmp_path / "global" / "pg_internal.init").symlink_to(tmp_path / "removed meanwhile")
    _tree_chown(tmp_path, os.getuid(), os.getgid())
    assert (tmp_path / "global" / "pg_control").stat().st_uid == os.getuid()
