// The workbench's View menu: zoom in / out / actual size (Ctrl+plus, Ctrl+minus, Ctrl+0, from
// any of the workbench's windows), presentation mode (F5: the presentation zoom, toolbars
// hidden) and the light and dark themes. Installing it applies the remembered zoom and theme.
#pragma once

class QMainWindow;
class QMenu;

namespace tlui {

// Fills `menu` (the View menu of `window`) and applies the remembered zoom and theme.
void installViewMenu(QMainWindow* window, QMenu* menu);

}  // namespace tlui
