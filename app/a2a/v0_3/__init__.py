"""A2A 0.3 as translations to and from 1.0: deletable as one folder when 0.3 is retired."""
