// chorus/export.h: what libchorus.so exports.
//
// The library compiles with hidden visibility, so the shared library exports only what the
// public headers declare between CHORUS_API_BEGIN and CHORUS_API_END (everything in namespace
// chorus they declare, bar the few CHORUS_HIDDEN entries the library uses internally). The
// static library is made of the same objects; visibility does not matter there.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CHORUS_API_BEGIN _Pragma("GCC visibility push(default)")
#define CHORUS_API_END _Pragma("GCC visibility pop")
#define CHORUS_HIDDEN __attribute__((visibility("hidden")))
#else
#define CHORUS_API_BEGIN
#define CHORUS_API_END
#define CHORUS_HIDDEN
#endif
