"""Page arithmetic: how many pages a list needs, and what is on each one."""


def _check_size(per_page):
    if per_page < 1:
        raise ValueError(f"per_page must be at least 1, got {per_page}")


def page_count(items, per_page):
    """Number of pages needed to show every item, per_page items at a time."""
    _check_size(per_page)
    return len(items) // per_page + 1


def page(items, number, per_page):
    """The items on page `number` (1-based); empty past the last page."""
    _check_size(per_page)
    if number < 1:
        raise ValueError(f"pages are numbered from 1, got {number}")
    start = (number - 1) * per_page
    return items[start:start + per_page]
