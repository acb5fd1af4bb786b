import unittest

from pager import page, page_count


class PageCountTest(unittest.TestCase):
    def test_last_page_partly_filled(self):
        self.assertEqual(page_count(list(range(23)), 10), 3)

    def test_fewer_items_than_one_page(self):
        self.assertEqual(page_count(["a", "b"], 10), 1)

    def test_exact_multiple_of_page_size(self):
        self.assertEqual(page_count(list(range(20)), 10), 2)

    def test_page_size_must_be_positive(self):
        with self.assertRaises(ValueError):
            page_count([1, 2, 3], 0)


class PageTest(unittest.TestCase):
    def test_first_and_last_page(self):
        items = list(range(1, 24))
        self.assertEqual(page(items, 1, 10), list(range(1, 11)))
        self.assertEqual(page(items, 3, 10), [21, 22, 23])

    def test_past_the_end_is_empty(self):
        self.assertEqual(page([1, 2, 3], 2, 3), [])

    def test_page_numbers_start_at_one(self):
        with self.assertRaises(ValueError):
            page([1, 2, 3], 0, 3)


if __name__ == "__main__":
    unittest.main()
