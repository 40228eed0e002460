import uvicorn

from corral_image_service.app import create_app
from corral_image_service.settings import ImageServiceSettings


def main() -> None:
    settings = ImageServiceSettings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_config=None)


if __name__ == "__main__":
    main()
