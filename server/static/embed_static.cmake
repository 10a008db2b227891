# Compiles the chat page (server/static/*.html, *.js, *.css) into ds_server: at build time
# embed_files.cmake writes static_assets.cpp (one byte array per file plus the table that
# server/static_files.cpp serves), so the daemon needs no files beside it. Included from
# server/CMakeLists.txt after ds_server exists. Editing a file rebuilds the table; adding
# one is picked up at the next configure (the glob is CONFIGURE_DEPENDS).
file(GLOB DELTASERVE_STATIC_FILES CONFIGURE_DEPENDS
     ${CMAKE_CURRENT_LIST_DIR}/*.html ${CMAKE_CURRENT_LIST_DIR}/*.js ${CMAKE_CURRENT_LIST_DIR}/*.css)
set(DELTASERVE_STATIC_CPP ${CMAKE_CURRENT_BINARY_DIR}/static_assets.cpp)
add_custom_command(
  OUTPUT ${DELTASERVE_STATIC_CPP}
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_LIST_DIR} -DOUTPUT=${DELTASERVE_STATIC_CPP}
          -P ${CMAKE_CURRENT_LIST_DIR}/embed_files.cmake
  DEPENDS ${DELTASERVE_STATIC_FILES} ${CMAKE_CURRENT_LIST_DIR}/embed_files.cmake
  COMMENT "Embedding the chat page (server/static)"
  VERBATIM)
target_sources(ds_server PRIVATE ${DELTASERVE_STATIC_CPP})
