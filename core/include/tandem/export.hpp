#pragma once
// Symbols of the core that plugins and the CLI use across shared-object boundaries.
// Everything else is built with hidden visibility (see STYLE.md: Boost.DLL pitfalls):
// interface and exception types must be exported so that typeinfo, catch and
// dynamic_cast agree between libtandem_core.so and every plugin.
#if defined(__GNUC__)
#define TANDEM_API __attribute__((visibility("default")))
#else
#define TANDEM_API
#endif
